"""Steps 2 and 4-6: the reward audit, evaluation, statistics, reports and the champion."""
