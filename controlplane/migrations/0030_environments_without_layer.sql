-- An environment with no package and no setup script has nothing to build: its build digest is
-- empty (controlplane.environments.specs.build_digest), no agent builds a layer for it and its
-- sessions start on the plain sandbox. Versions made before had the digest of an empty build;
-- those (and the sessions pinning them) lose it. Every other digest stays as it was.
UPDATE environment_versions SET build_digest = ''
    WHERE build_digest IN (
        '102b51b9765a56a3e899f7cf0ee38e5251f9c503b357b330a49183eb7b155604',
        'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
    );
UPDATE sessions SET environment_build_digest = ''
    WHERE environment_build_digest IN (
        '102b51b9765a56a3e899f7cf0ee38e5251f9c503b357b330a49183eb7b155604',
        'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
    );
