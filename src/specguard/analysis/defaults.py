"""The statistics defaults, one owner: the check plan's ``statistics``, ``specguard compare`` and the A/B maths.

2000 bootstrap resamples put the 2.5 % and 97.5 % interval ends on 50 replicates each; fewer than 100 leave
them on a handful. A percentile counts only with ``MIN_TAIL_SAMPLES`` observations beyond it.
"""

from __future__ import annotations

DEFAULT_RESAMPLES = 2000
MIN_RESAMPLES = 100
MIN_TAIL_SAMPLES = 5
# The change the sample-size advice sizes for when no objective names one (a check passes its min_improvement).
DEFAULT_TARGET_CHANGE = 0.10
