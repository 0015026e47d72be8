"""The sandbox image build's own decisions: which mirror, what the root file system gets.
(The whole build, debootstrap and docker import, runs in CI before the docker tests.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dataplane_agent.sandboxes.images import (
    FALLBACK_MIRROR,
    SANDBOX_UID,
    AptSource,
    apt_sources,
    choose_mirror,
    prepare_rootfs,
)


def test_the_mirror_comes_from_the_hosts_apt_sources_in_either_format(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/one.gpg] http://one.example/debian bookworm-updates main\n"
    )
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb deb-src\n"
        "# a comment inside the stanza\n"
        "URIs: http://two.example/debian\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main\n"
        "Signed-By: /usr/share/keyrings/two.gpg\n"
        "\n"
        "Types: deb\n"
        "URIs: http://two.example/debian-security\n"
        "Suites: bookworm-security\n"
    )
    (tmp_path / "sources.list.d" / "off.sources").write_text(
        "Enabled: no\nTypes: deb\nURIs: http://off.example/\nSuites: bookworm\n"
    )

    sources = apt_sources(tmp_path)

    assert [source.uri for source in sources] == [
        "http://one.example/debian",
        "http://two.example/debian",
        "http://two.example/debian-security",
    ]
    assert sources[0].keyring == "/usr/share/keyrings/one.gpg"
    assert choose_mirror(sources, "bookworm") == AptSource(
        "http://two.example/debian", ("bookworm", "bookworm-updates"), "/usr/share/keyrings/two.gpg"
    )
    assert choose_mirror(sources, "trixie").uri == FALLBACK_MIRROR


@pytest.mark.skipif(os.geteuid() != 0, reason="handing directories to uid 1000 needs root")
def test_the_root_file_system_gets_the_unprivileged_user_and_loses_caches(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    for directory in ("etc", "var/cache/apt/archives", "usr/share/doc/bash", "run"):
        (rootfs / directory).mkdir(parents=True)
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\n")
    (rootfs / "etc" / "shadow").write_text("root:*:19000:0:99999:7:::\n")
    (rootfs / "etc" / "resolv.conf").write_text("nameserver 192.0.2.1\n")
    (rootfs / "var/cache/apt/archives/bash.deb").write_text("deb")
    (rootfs / "usr/share/doc/bash/README").write_text("doc")

    prepare_rootfs(rootfs)
    prepare_rootfs(rootfs)  # again: nothing doubles

    assert (rootfs / "etc" / "passwd").read_text().count(f":{SANDBOX_UID}:{SANDBOX_UID}:") == 1
    assert "agent:x:1000:" in (rootfs / "etc" / "group").read_text()
    for directory in ("workspace", "home/agent"):
        assert (rootfs / directory).stat().st_uid == SANDBOX_UID
    assert (rootfs / "run" / "astrabox").is_dir()
    assert not any((rootfs / "var/cache/apt").iterdir()) and not any((rootfs / "usr/share/doc").iterdir())
    assert not (rootfs / "etc" / "resolv.conf").exists()
