"""The big run priced before it is rented: FLOPs, memory per GPU, hours, cost, loss, what binds.

hardware.py  planning_hardware: catalogue or measured figures at the policy's matmul dtype
mfu.py       choose_mfu: given, measured on the user's own runs (MLflow), or a stated default
loss.py      predict_loss and compute_optimal from an exported fit (scaling/reports/fitfile.py)
vocabulary.py  across_vocabularies: a law of one vocabulary for a model of another, in bits per byte
memory.py    plan_memory: on the GPUs given, the fewest that fit, and fallbacks
comm.py      plan_communication: one step's collectives on NVLink and the network, what of them shows
make.py      make_plan: Plan with its constraints and the binding corner (no I/O)
render.py    render_table, render_markdown, plan_dict, write_plan
export.py    torchtitan_module: the planned run as a torchtitan job (export=torchtitan)
plot.py      render_plan_plot: plan.png, the planned run on the fit's compute-optimal frontier

Its schema, PlanConfig (budget, data, cluster) and parse_plan, is in config/plan.py.
"""

from ablate.api import lazy_api

__all__, __getattr__, __dir__ = lazy_api(
    __name__,
    {
        "hardware": ("planning_hardware",),
        "mfu": ("choose_mfu",),
        "make": ("make_plan",),
    },
    modules=("render", "vocabulary"),
)
