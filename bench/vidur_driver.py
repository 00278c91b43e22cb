"""Run one Vidur simulation with its own command-line flags and print how long each part took, as JSON.

Not part of specguard: bench/sim_speed.py runs it with Vidur's Python (its own venv) in Vidur's source
directory, ``python bench/vidur_driver.py VIDUR_FLAGS...``. It does what ``python -m vidur.main`` does
(vidur/main.py: parse the flags, seed, build the Simulator, run it, write the metrics at exit) with a clock
around each part, and counts the requests and batches from Vidur's own id counters.
"""

import atexit
import json
import time

t0 = time.perf_counter()
from vidur.config import SimulationConfig  # noqa: E402
from vidur.entities.batch import Batch  # noqa: E402
from vidur.entities.batch_stage import BatchStage  # noqa: E402
from vidur.entities.request import Request  # noqa: E402
from vidur.simulator import Simulator  # noqa: E402
from vidur.utils.random import set_seeds  # noqa: E402


def main() -> None:
    t1 = time.perf_counter()
    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)
    # Building the Simulator trains the execution-time predictor (or loads Vidur's cache of it), tabulates its
    # predictions and generates the requests.
    simulator = Simulator(config)
    t2 = time.perf_counter()
    simulator.run()
    t3 = time.perf_counter()
    atexit.unregister(simulator._write_output)
    simulator._write_output()
    t4 = time.perf_counter()
    out = {
        "import_s": t1 - t0,
        "setup_s": t2 - t1,
        "run_s": t3 - t2,
        "write_s": t4 - t3,
        "batches": Batch._id + 1,
        "batch_stages": BatchStage._id + 1,
        "simulated_s": simulator._time,
        "requests": Request._id + 1,
    }
    print("VIDUR_TIMES " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
