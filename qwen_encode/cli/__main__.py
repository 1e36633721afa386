"""``python -m qwen_encode.cli``: the same command as the ``qwen-encode`` script."""

import sys

from .main import main

sys.exit(main())
