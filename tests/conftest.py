"""Settings for every test: hypothesis draws the same examples on every CI run.

Locally each run draws new examples (and keeps failing ones in its database), which is how
property tests find rare bugs; on CI (`CI` set) the draw is derandomized, so a result is the
code's, not the luck of one run's seed. Examples per property: RLIX_HYPOTHESIS_EXAMPLES.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
