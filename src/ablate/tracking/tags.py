"""The MLflow tag and metric names this project writes and reads: one place, so that the writer
(a training run, a sweep, a study, a fit) and every reader agree."""

CONFIG_HASH_TAG = "ablate.config_hash"  # a training run's config hash (provenance.config_hash)
SWEEP_TAG = "ablate.sweep_id"  # the sweep a run was launched by
REASON_TAG = "ablate.status_reason"  # why a run ended as it did ("pruned: ...", a traceback's last line)
OWNER_TAG = "ablate.owner"  # the process writing a training run: "HOST PID START_TIME" (run/lock.py)
RESUMED_TAG = "ablate.resumed_from_step"  # the checkpoint step a resumed run started from
KIND_TAG = "ablate.kind"  # runs that are not points of a fit: "sweep", "study", "fit", "trunk"
TRUNK_KIND = "trunk"  # a constant-rate trunk; its cooldown branches are the points (run/branches.py)
DATA_TAG = "ablate.data"  # the tokens a run trained on: "NAME FINGERPRINT [PACKAGE=VERSION ...]"
FORK_TAG = "ablate.fork_step"  # a cooldown branch: the step of its trunk that it started from
HOST_TAG = "ablate.launcher_host"  # a sweep parent run's launching host and process
PID_TAG = "ablate.launcher_pid"
FIT_STATUS_TAG = "ablate.fit_status"  # "converged" or "DID NOT CONVERGE"
FIT_VERDICT_TAG = (
    "ablate.fit_verdict"  # trusted, wide or not_determined: approach 3's (fit), the worst in the data (compare)
)

# Where a run came from (tracking/context.py, provenance.environment): ablate's version, the
# environment's, and whether the user's working tree had uncommitted changes beside its commit
# (MLflow's mlflow.source.git.commit).
ABLATE_VERSION_TAG = "ablate.version"
TORCH_TAG = "ablate.torch"
PYTHON_TAG = "ablate.python"
CPU_TAG = "ablate.cpu"
CPU_ISA_TAG = "ablate.cpu_isa"  # the CPU flags that pick torch's kernels (provenance.ISA_FLAGS)
GPU_TAG = "ablate.gpu"
SOURCE_DIRTY_TAG = "ablate.source.git.dirty"

# MLflow's own experiment tags. The UI (3.x) opens an experiment in its GenAI view unless the kind
# says model training; a shared view state is a saved chart layout the UI loads by its key.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING_KIND = "custom_model_development"
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
NOTE_TAG = "mlflow.note.content"  # a run's or an experiment's description (markdown)

# MLflow's system metrics (tracking/system_metrics.py) are named system/...: the machine's, not the run's.
SYSTEM_METRICS_PREFIX = "system/"

# A metric every training record carries; its last step is the last step the store has.
STEP_KEY = "flops"
