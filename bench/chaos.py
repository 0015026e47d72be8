"""The chaos suite's command: `python bench/chaos.py --duration 600 --seed 7` (see bench/chaos/)."""

import _common  # noqa: F401 - first: the repository on sys.path, gRPC's logging quiet
from chaos.main import main

if __name__ == "__main__":
    main()
