"""Environment layers: an environment's packages, built once per build digest on this host and shared.

    packages.py   the package entries, re-checked here (names and pins only; never an option)
    steps.py      one build step run as a program: its output's end (bounded) is the error it fails with
    downloads.py  fetching on the host what the packages are, running no package code
    npm.py        npm packages from the registry only: resolved, every source checked, then installed
    layers.py     the layer store: one build per digest at a time, staging then an atomic rename,
                  failures not cached, last use recorded, unused old layers swept

Design. The agent never runs package-manager code on the host on data a caller controls.
Downloading happens on the host, as the agent's user, through the host's configured registries,
with steps that execute nothing of a package: `apt-get install --download-only` into a private
archive directory (no locking of the host's apt), `pip download --only-binary=:all:` (wheels only:
no setup.py runs, so a package published only as an sdist fails the build with pip's own message)
and npm's resolution, checked, then `npm ci --ignore-scripts --prefix` into the staging directory (no
install script ever runs, so a package that needs one to build a native module does not work; a
dependency on a git repository, a tarball URL, a file or a directory fails the build, `npm.py`). Installing happens in a
sandbox with no network: on the local driver the Debian packages are extracted with `dpkg-deb -x`
(no maintainer scripts) and the wheels installed by `pip install --no-index --find-links` inside a
sandbox of the driver itself (its namespaces, user and limits; the build's directory its only
writable mount). The finished layer is a prefix directory `<state dir>/layers/<build_digest>/`
(`usr/`, `python/`, `node/`) that every sandbox of the environment mounts read-only at
/opt/astrabox/env, with PATH, PYTHONPATH, NODE_PATH and LD_LIBRARY_PATH extended to it.

Never half-built: a build happens in `layers/.staging/`; only a rename into place, after every step
succeeded, makes a layer usable, and whatever a crashed build left in staging is removed by the next
start. One build per digest at a time: sessions of the same environment that start together wait for
the one build and share it. A failed build's error is the package manager's own (its output's end,
at most 4 KiB); nothing of it is kept, so a later start builds again. A layer no held session uses
and unused for the retention period (`--layer-retention-days`) is removed by a periodic sweep.
"""
