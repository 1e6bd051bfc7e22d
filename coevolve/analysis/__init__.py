"""Analysis of rollouts, pure: pass rates with 95% intervals and pass^k (`stats`), failure composition,
the planning-style fingerprint and its drift, the judge's accuracy (`rollouts`), batch summaries
(`summary`), tau2's metrics and comparability (`tau2`), edit usage (`usage`), the benches' resumable
cells (`cells`)."""

from coevolve.analysis.cells import read_cells, write_cell
from coevolve.analysis.rollouts import composition, drift, fingerprint, hard_failures, locus_accuracy
from coevolve.analysis.stats import PassRate, mean_ci, paired_difference, pass_rate
from coevolve.analysis.summary import TESTBED_NOTICE, failure_causes, summarise

__all__ = ["TESTBED_NOTICE", "PassRate", "composition", "drift", "failure_causes", "fingerprint", "hard_failures",
           "locus_accuracy", "mean_ci", "paired_difference", "pass_rate", "read_cells", "summarise", "write_cell"]
