"""What a run listens on: gloo's per-rank sockets bind to loopback on one node, whatever the host's name resolves
to; several nodes bind to the interface the user names (GLOO_SOCKET_IFNAME), and are refused without one."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest
from conftest import run

from ignite_ddl import LaunchSettings
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.launcher.settings import plan_launch

# Rank 0 lists the listening IPv4 sockets of the machine while both ranks sit between two barriers, i.e. while
# the process group (and every socket gloo opened for it) is alive.
PROBE = textwrap.dedent(
    """
    import json, sys
    import ignite.distributed as idist
    import torch.distributed as dist
    from ignite_ddl import LaunchSettings, launch

    def listening():
        found = set()
        for line in open("/proc/net/tcp").read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                host, port = fields[1].split(":")
                found.add(".".join(str(int(host[i : i + 2], 16)) for i in (6, 4, 2, 0)) + f":{int(port, 16)}")
        return found

    def probe(local_rank):
        dist.barrier()
        during = sorted(listening()) if idist.get_rank() == 0 else None
        dist.barrier()
        return during

    before = listening()
    during = launch(probe, LaunchSettings(backend="gloo", nproc_per_node=2))
    print(json.dumps({"new": sorted(set(during) - before)}))
    """
)


def _lan_address() -> str | None:
    """This machine's address on a non-loopback interface (the one routes leave through), if it has one."""
    for target in ("192.0.2.1", "10.255.255.255"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.connect((target, 9))  # UDP: chooses the source address, sends nothing
            except OSError:
                continue
            address = s.getsockname()[0]
            if not ipaddress.ip_address(address).is_loopback and address != "0.0.0.0":
                return address
    return None


@pytest.mark.distributed
def test_one_node_gloo_listens_on_loopback_only(tmp_path):
    """The host's name is mapped to its LAN address in private UTS and mount namespaces (own hostname, own
    /etc/hosts): gloo left alone binds its rank sockets there; the launcher must keep them on loopback."""
    address = _lan_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to map the host name to")
    if shutil.which("unshare") is None or not os.path.exists("/proc/net/tcp"):
        pytest.skip("needs unshare(1) and /proc/net/tcp (Linux)")
    if subprocess.run(["unshare", "--uts", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --uts --mount is not permitted here (needs root or user namespaces)")
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{address} ignite-ddl-probe\n")
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    inner = 'hostname ignite-ddl-probe && mount --bind "$1" /etc/hosts && exec "$2" "$3"'
    result = run(["unshare", "--uts", "--mount", "sh", "-c", inner, "sh", str(hosts), sys.executable, str(script)])
    assert result.returncode == 0, result.stderr
    new = json.loads(result.stdout.strip().splitlines()[-1])["new"]
    assert new, "the run opened no listening socket at all: the probe saw nothing"
    assert all(ipaddress.ip_address(s.rsplit(":", 1)[0]).is_loopback for s in new), new


def test_several_nodes_over_a_network_need_a_named_interface():
    settings = LaunchSettings(backend="gloo", nproc_per_node=1, nnodes=2, node_rank=0, master_addr="192.0.2.1",
                              master_port=29500)  # fmt: skip
    with pytest.raises(ConfigError, match="GLOO_SOCKET_IFNAME"):
        plan_launch(settings, cuda_devices=0, environ={})
    assert plan_launch(settings, cuda_devices=0, environ={"GLOO_SOCKET_IFNAME": "eth0"}).nnodes == 2
    # several "nodes" on this machine (rendezvous on loopback) need no name: loopback is used
    local = LaunchSettings(backend="gloo", nproc_per_node=1, nnodes=2, node_rank=0, master_addr="127.0.0.1",
                           master_port=29500)  # fmt: skip
    assert plan_launch(local, cuda_devices=0, environ={}).nnodes == 2
