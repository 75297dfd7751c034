"""``import amdsmi`` for an exporter process under test: the fake, with a configured fleet.

Put this directory first on ``PYTHONPATH`` and set ``FAKE_AMDSMI_FLEET`` (see
``fake_amdsmi.fleet``, e.g. ``mi300x:6,mi210:2``); ``gpuscale exporter --source
amd`` then runs its real code against the fake library.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fake_amdsmi

fake_amdsmi.configure(fake_amdsmi.fleet(os.environ.get("FAKE_AMDSMI_FLEET", "mi300x:8")))
# The importer gets the fake module itself, with its configured state.
sys.modules[__name__] = fake_amdsmi
