import sys

from ignite_ddl.cli import main

if __name__ == "__main__":
    sys.exit(main())
