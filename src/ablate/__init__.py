"""ablate: small, honest training experiments turned into decisions about big ones.

Layers, each a subpackage whose imports only point down this list (tests/test_architecture.py
checks it). Every __init__ states its package's API, `__all__`, which other packages import from
(never from its modules), and loads each name only when it is first used (api.py), so that importing
one module never loads its siblings: the planning and fitting code runs without torch. config/
imports its API at once: the schemas and their parse functions, none of which loads a dependency.

    config/ conf/      every command's schema and parse function; the presets (package data)
    __main__.py        `python -m ablate`: the command line (cli/)
    api.py             lazy_api: a package's `__all__`, loaded name by name when first used (PEP 562)
    child.py           the one entry point of every process the project starts (`python -m ablate.child`)
    errors.py files.py faults.py host.py provenance.py   ConfigError, atomic writes, failpoints,
                                                       cores and processes, config hash and code version
    redact.py streams.py   passwords in URIs hidden wherever text is recorded or printed; standard
                           streams that a closed descriptor or a departed reader cannot break
    hydra_app.py       App: the one door to Hydra (compose, run, multirun); only it imports Hydra's internals
    oneline.py         fail, one_line: a ConfigError said in one line and exit 2; explain: Hydra's errors alike
    model/     the GPT and what is applied to it: accounting, precision policies, the optimizer
    data/      token sources: the synthetic language, text, token files
    perf/      hardware, memory, decode bound, roofline, profiling
    tracking/  MLflow: the run tracker, stores, tags, the outage spool
    run/       one training run: prepare, decide, train, checkpoint, DDP ranks, signals, results
    scaling/   scaling laws fitted to runs: points, laws, bootstrap, frontier, export
    plan/      the big run priced: hardware, MFU, memory, loss, constraints, rendering
    sweep/     many runs: the Hydra callback, the plan, the summary, recorded studies, launchers
    search/    Optuna studies whose trials are sweep jobs, with pruning
    cli/       the commands (`ablate COMMAND`), one module each, over the library
"""

__version__ = "0.1.0"
