import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("OOM_DOCTOR_SHARED", ROOT.parent / "shared"))
REAL_LOGS = SHARED / "real_logs"
SAMPLES = ROOT / "log_samples"


@pytest.fixture
def diagnose_text():
    from advisor.pipeline import diagnose_text as run
    return run
