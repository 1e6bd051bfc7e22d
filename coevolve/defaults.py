"""The defaults of the configuration tree's evolve and data sections (`coevolve.config`), in a module
that imports nothing, so the CLI's options share them without loading the tree (pydantic) at start-up."""

VAL_N = 30  # validation instances a harness search compares candidates on
VAL_SEEDS = 2  # seeds each validation instance is evaluated at
TRAIN_BATCH = 20  # train instances an evolution iteration collects failures from
ROWS = 200  # target rows of a dataset
SAMPLES = 2  # rollouts per train instance of a dataset build
K = 3  # rewrite candidates per failure
