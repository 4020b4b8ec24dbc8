from mbmem_lint.cli import entry

entry()
