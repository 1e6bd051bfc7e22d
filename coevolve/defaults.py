"""The defaults of the configuration tree's evolve and data sections (`coevolve.config`), in a module
that imports nothing: the tree, the settings it builds (`EvolveConfig`, `BuildConfig`) and the CLI's
options (without loading pydantic at start-up) all take them from here."""

ITERATIONS = 200  # harness-search steps at most (the rollout budget usually ends a search first)
ROLLOUTS = 1500  # rollout budget of one harness search
CANDIDATES = 3  # edits a proposer call offers
ALPHA = 0.1  # the search's error rate: a release (race) or an acceptance (loop) of an edit that does not help

VAL_N = 30  # validation instances a harness search compares candidates on
VAL_SEEDS = 2  # seeds each validation instance is evaluated at
TRAIN_BATCH = 20  # train instances an evolution iteration collects failures from
ROWS = 200  # target rows of a dataset
SAMPLES = 2  # rollouts per train instance of a dataset build
K = 3  # rewrite candidates per failure
