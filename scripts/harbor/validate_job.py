"""Loads every file of a Harbor job directory with Harbor's own pydantic models.

Usage: python validate_job.py JOB_DIR   (in a venv with `harbor` installed)
Prints one line per file kind with its count, exits 1 naming the first file that fails.
"""
import json
import sys
from pathlib import Path

from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult
from harbor.models.trajectories.trajectory import Trajectory
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult

job = Path(sys.argv[1])
counts = {"job config": 0, "job result": 0, "trial config": 0, "trial result": 0, "trajectory": 0}


def load(model, path, kind):
    try:
        model.model_validate_json(path.read_text())
    except Exception as e:  # noqa: BLE001 - any failure is reported with its file
        print(f"INVALID {kind} {path}: {e}")
        sys.exit(1)
    counts[kind] += 1


load(JobConfig, job / "config.json", "job config")
load(JobResult, job / "result.json", "job result")
for trial in sorted(p for p in job.iterdir() if p.is_dir()):
    load(TrialConfig, trial / "config.json", "trial config")
    load(TrialResult, trial / "result.json", "trial result")
    if (trial / "agent" / "trajectory.json").exists():  # none when the agent never ran
        load(Trajectory, trial / "agent" / "trajectory.json", "trajectory")
print(json.dumps(counts))
