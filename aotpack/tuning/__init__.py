"""Offline tuning (docs/tuning.md): the build host compiles candidates into a job, the target
GPU measures them with the shipped launcher (`aotpack-run --tune`), the results become a tuning
database that `aotpack build --tuning-db` compiles the winners from.

    keys.py    the database key of a kernel op (arch, SM count, op, template sources, toolchain)
    space.py   which ops are tunable, their candidate configs, compiling one candidate
    job.py     `aotpack tune`: candidates of every tunable op → job folder of one-op bundles
    db.py      results → database records; merge; lookup at build time
"""
