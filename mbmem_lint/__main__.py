import sys

from mbmem_lint.cli import main

sys.exit(main())
