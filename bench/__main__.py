"""``python -m bench``: aiowheel head to head with the event loop's own timers.

Contenders run side by side in this one process, alternating A/B within each repeat (so a
noisy neighbour hurts both alike), each on a fresh loop; the figure reported is the median of
the repeats, and every ratio compares two medians of the same run. See README.md for what
each workload means; ``--targets`` compares the run with the project's targets.
"""

from __future__ import annotations

import sys

from .suite import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
