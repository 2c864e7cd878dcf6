"""python -m decodescope ... (the same as the `decodescope` console command)."""
import sys

from .cli import main

sys.exit(main())
