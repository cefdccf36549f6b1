import sys

from commlens.plan.cli import main

sys.exit(main())
