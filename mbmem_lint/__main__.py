from mbmem_lint.cli import main

main()
