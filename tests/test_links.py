"""`links:`: each node's link in the lab description, its flags, and who refuses what.

Parsing and the meaning of a node's and a pair's link (labctl/links.py), the
`--link` flag, bad input (one line, exit 2), the backends' refusals (local; the
Kubernetes bandwidth plugin's limits; a kernel without netem), and what one
node applies (labctl/backends/compose/shaping.py, then the tc commands of workloads/_shape.py).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from labctl import backends, links, spec as specmod
from labctl.backends.compose import shaping
from labctl.links import Link, Links
from labctl.backends import spec_from_stored
from labctl.rendered import stored_spec
from labctl.spec import SpecError
from workloads import _shape

M = 10 ** 6


def lab(**fields) -> specmod.LabSpec:
    return backends.from_dict({"backend": "compose", **fields})


def labctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labctl.cli", *args], capture_output=True,
                          text=True, timeout=60)


# ---- the model --------------------------------------------------------------------
def test_rates_and_latencies_parse_in_tc_units():
    assert links.parse_rate("100mbit", "x") == 100 * M
    assert links.parse_rate("1.5Gbit", "x") == 1_500 * M
    assert links.parse_rate("1.1kbit", "x") == 1100
    assert links.parse_rate("2mibit", "x") == 2 * 2 ** 20
    assert links.parse_latency("5ms", "x") == 5000
    assert links.parse_latency("250us", "x") == 250
    assert links.parse_latency("0.5s", "x") == 500_000


def test_every_form_of_links_means_the_same():
    short = lab(nodes=3, links="100mbit").links
    long = lab(nodes=3, links={"default": {"rate": "100mbit"}}).links
    assert short == long == Links(default=Link(100 * M))
    both = lab(nodes=3, links={"nodes": {2: "1gbit,5ms", "1": {"latency": "2ms"}},
                               "pairs": {"2-0": "50mbit"}}).links
    assert both.nodes == {1: Link(None, 2000), 2: Link(1000 * M, 5000)}
    assert both.pairs == {(0, 2): Link(50 * M)}


def test_a_path_meets_the_slowest_rate_and_every_delay():
    links_ = Links(default=Link(1000 * M), nodes={2: Link(100 * M, 3000)},
                   pairs={(0, 1): Link(50 * M, 1000)})
    assert links_.path(0, 2) == Link(100 * M, 3000)
    assert links_.path(2, 0) == Link(100 * M, 3000)
    assert links_.path(0, 1) == Link(50 * M, 1000)
    assert links_.path(1, 2) == Link(100 * M, 3000)
    assert Links(nodes={2: Link(100 * M)}).path(0, 1) == Link()     # unshaped


def test_the_lab_file_form_round_trips_through_yaml_and_the_stored_spec(tmp_path):
    s = lab(nodes=4, links={"default": "1gbit", "nodes": {3: "100mbit"}, "pairs": {"0-1": "50mbit"}})
    f = tmp_path / "lab.yaml"
    f.write_text(specmod.dump(s))
    assert backends.load(f) == s
    assert spec_from_stored(stored_spec(s), "here") == s
    assert s.to_dict()["links"] == {"default": "1gbit", "nodes": {3: "100mbit"}, "pairs": {"0-1": "50mbit"}}


def test_a_lab_without_links_stores_and_plans_exactly_as_before():
    s = lab()
    assert s.links is None and "links" not in stored_spec(s)
    assert lab(links={"nodes": {}}).links is None            # shapes nothing: no links


def test_flags_say_every_node_one_node_or_a_pair():
    s = backends.load(None, {"backend": "compose", "nodes": 3,
                             "links": links.from_flags(["1gbit", "2=100mbit", "0-1=50mbit,5ms"], SpecError)})
    assert s.links == Links(default=Link(1000 * M), nodes={2: Link(100 * M)},
                            pairs={(0, 1): Link(50 * M, 5000)})


def test_the_workloads_see_the_configured_links():
    from labctl.lab import make_plan

    p = make_plan(lab(nodes=3, nproc_per_node=1, links={"nodes": {2: "100mbit"}}))
    assert json.loads(p.nodes[0].env["LAB_LINKS"]) == {"nodes": {"2": "100mbit"}}
    assert "LAB_LINKS" not in make_plan(lab(nodes=3)).nodes[0].env


# ---- bad input: one line, exit 2 --------------------------------------------------
BAD = [
    (["--nodes", "3", "--link", "9=1gbit"], "links.nodes: expected a node of this lab: 0 to 2, given 9"),
    (["--link", "fast"], "links.default: expected a rate with its unit"),
    (["--link", "0bit"], "links.default: expected a rate > 0"),
    (["--link", "10mbps"], "tc reads 'mbps' as bytes per second, so write bits (mbit)"),
    (["--link", "1gbit", "--link", "2gbit"], "--link: the default link is given twice"),
    (["--link", "x=1gbit"], "--link: expected [NODE=|A-B=]RATE[,LATENCY]"),
    (["--link", "1-1=1gbit"], "links.pairs: expected two different nodes"),
    (["--link", "1gbit,0ms"], "links.default: expected a delay > 0"),
    (["--backend", "local", "--link", "1gbit"], "links: the local backend cannot shape links"),
    (["--backend", "k8s", "--nodes", "3", "--link", "2=1gbit"], "every node of a Job shares one pod template"),
    (["--backend", "k8s", "--link", "0-1=1gbit"], "not the traffic of a pair of nodes"),
    (["--backend", "k8s", "--link", "1gbit,5ms"], "shapes rate only, not latency"),
    (["--fault", "delay:1=50", "--link", "1=1gbit"], "no delay fault on node 1, whose link the lab shapes"),
]


@pytest.mark.parametrize("args, says", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_links_are_one_line_and_exit_2(args, says):
    argv = ["validate", *args] if "--backend" in args else ["validate", "--backend", "compose", *args]
    done = labctl(*argv)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("raw, says", [
    ({"nodes": {9: "1gbit"}}, "links.nodes: expected a node of this lab: 0 to 2, given 9"),
    ({"default": {"rate": "fast"}}, "links.default.rate: expected a rate with its unit"),
    ({"default": "0bit"}, "links.default: expected a rate > 0"),
    ({"speed": "1gbit"}, "links: expected one of default, nodes, pairs"),
    ({"nodes": {1: "1gbit"}, "pairs": {"0-1": "2tbit"}}, "from 1kbit to 1tbit"),
    ({"pairs": {"0-1": "1gbit", "1-0": "2gbit"}}, "each pair once"),
    (12, "links: expected a rate for every node"),
])
def test_bad_links_in_a_lab_file_name_the_field(raw, says):
    with pytest.raises(SpecError) as caught:
        lab(nodes=3, links=raw)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_latency_on_a_kernel_without_netem_is_refused_before_anything_starts(tmp_path):
    from labctl.backends.compose.preflight import kernel_has

    if kernel_has("netem") is not False:
        pytest.skip("this kernel has netem (or it cannot be told): nothing to refuse")
    done = labctl("up", "--backend", "compose", "--nodes", "2", "--link", "1gbit,5ms",
                  "--out", str(tmp_path / "run"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert "links: a latency needs tc netem" in done.stderr and "CONFIG_NET_SCH_NETEM" in done.stderr
    assert not (tmp_path / "run").exists()


def test_the_kernel_check_reads_the_kernel_config(monkeypatch):
    from labctl.backends.compose import preflight as compose

    monkeypatch.setattr(compose.os.path, "isdir", lambda p: False)
    monkeypatch.setattr(compose.os.path, "exists", lambda p: False)
    monkeypatch.setattr(compose, "_kernel_config", lambda: "CONFIG_NET_SCH_HTB=y\n# CONFIG_IFB is not set\n")
    s = lab(links="1gbit")
    assert compose.kernel_has("htb") is True and compose.kernel_has("ifb") is False
    assert "lacks them" in compose.links_kernel_refusal(s) and "CONFIG_IFB" in compose.links_kernel_refusal(s)
    monkeypatch.setattr(compose, "_kernel_config", lambda: None)
    assert compose.links_kernel_refusal(s) is None          # cannot be told: let tc say it


# ---- what one node applies ----------------------------------------------------------
HOSTS = ["lab-0", "lab-1", "lab-2"]


def test_a_node_at_100mbit_shapes_both_directions_of_its_own_link():
    links_ = lab(nodes=3, links={"nodes": {2: "100mbit"}}).links
    assert shaping.node_shaping(links_, 0, HOSTS) is None and shaping.node_shaping(links_, 1, HOSTS) is None
    shape = shaping.node_shaping(links_, 2, HOSTS)
    assert shape["egress"] == shape["ingress"] == {"rate_bps": 100 * M} and shape["peers"] == []
    cmds = [" ".join(c) for c in _shape.commands(shape, {})]
    assert "tc qdisc add dev eth0 root handle 1: htb default 10" in cmds
    assert "tc qdisc add dev lab-in root handle 1: htb default 10" in cmds
    assert ("tc filter add dev eth0 parent ffff: protocol all u32 match u32 0 0 action mirred "
            "egress redirect dev lab-in") in cmds
    tops = [c for c in cmds if "classid 1:1 " in c]
    assert len(tops) == 2 and all("rate 100000000bit ceil 100000000bit" in c for c in tops)
    assert not any("netem" in c for c in cmds)         # no latency asked: no netem needed
    # both data queues hold 200 ms of the rate (2.5 MB at 100 Mbit/s): neither drops on 4
    # nodes (docs/network.md, "The queues must not drop"); a slow link keeps 256 KiB at least
    assert "tc qdisc add dev eth0 parent 1:10 handle 10: bfifo limit 2500000" in cmds
    assert "tc qdisc add dev lab-in parent 1:10 handle 10: bfifo limit 2500000" in cmds
    assert _shape.queue_bytes(1 * M) == 256 * 1024


def test_a_pair_rule_adds_a_class_per_peer_filtered_by_its_address():
    links_ = lab(nodes=3, links={"default": "1gbit", "pairs": {"0-2": "50mbit,2ms"}}).links
    shape = shaping.node_shaping(links_, 0, HOSTS)
    (peer,) = shape["peers"]
    assert peer["host"] == "lab-2" and peer["egress"] == {"rate_bps": 50 * M, "latency_us": 2000}
    assert peer["ingress"] == {"rate_bps": 50 * M}          # the pair's delay is added by the sender
    cmds = [" ".join(c) for c in _shape.commands(shape, {"lab-2": "10.0.0.3"})]
    assert "tc filter add dev eth0 parent 1: protocol ip prio 3 u32 match ip dst 10.0.0.3/32 flowid 1:102" in cmds
    assert "tc filter add dev lab-in parent 1: protocol ip prio 3 u32 match ip src 10.0.0.3/32 flowid 1:102" in cmds
    assert "tc qdisc add dev eth0 parent 1:102 handle 102: netem delay 2000us limit 10000" in cmds
    assert any("classid 1:102 htb rate 50000000bit ceil 50000000bit" in c for c in cmds)
    assert shaping.node_shaping(links_, 1, HOSTS)["peers"] == []     # node 1: its own link only


def test_a_shaped_nodes_egress_has_a_class_per_peer_sharing_its_rate_evenly():
    links_ = lab(nodes=3, links={"nodes": {2: "50mbit"}, "pairs": {"1-2": "20mbit"}}).links
    shape = shaping.node_shaping(links_, 2, HOSTS)
    assert shape["fair"] == [{"node": 0, "host": "lab-0"}]          # node 1 has its pair class
    share = _shape.fair_share(50 * M, 3)                             # 1:10, node 0's, node 1's
    assert share == 15 * M
    cmds = [" ".join(c) for c in _shape.commands(shape, {"lab-0": "10.0.0.1", "lab-1": "10.0.0.2"})]
    q = _shape.quantum(50 * M)
    assert f"tc class add dev eth0 parent 1:1 classid 1:100 htb rate {share}bit ceil {50 * M}bit prio 1 quantum {q}" in cmds
    assert f"tc class add dev eth0 parent 1:1 classid 1:10 htb rate {share}bit ceil {50 * M}bit prio 1 quantum {q}" in cmds
    # the pair's class is guaranteed the smaller of its cap and the share, and borrows to its cap
    assert f"tc class add dev eth0 parent 1:1 classid 1:101 htb rate {15 * M}bit ceil {20 * M}bit prio 1 quantum {q}" in cmds
    assert "tc filter add dev eth0 parent 1: protocol ip prio 3 u32 match ip dst 10.0.0.1/32 flowid 1:100" in cmds
    assert "tc qdisc add dev eth0 parent 1:100 handle 100: bfifo limit 1250000" in cmds
    # the guarantees fit the node's rate, and what it receives is shaped as before: no
    # class per peer on the ingress side (a switch port's one queue)
    guaranteed = [int(c.split(" rate ")[1].split("bit")[0]) for c in cmds
                  if c.startswith("tc class add dev eth0") and "classid 1:1 " not in c]
    assert sum(guaranteed) <= 50 * M
    assert not any(c.startswith("tc class add dev lab-in") and "classid 1:100" in c for c in cmds)
    # every peer with a pair rule: no fair peer left, and still the node's rate shared
    # evenly on egress; the ingress keeps the pair class's own guarantee
    both = shaping.node_shaping(lab(nodes=2, links={"default": "100mbit", "pairs": {"0-1": "50mbit"}}).links,
                                0, HOSTS[:2])
    assert both["fair"] == []
    cmds2 = [" ".join(c) for c in _shape.commands(both, {"lab-1": "10.0.0.2"})]
    assert any(c.startswith("tc class add dev eth0") and f"classid 1:101 htb rate {45 * M}bit ceil {50 * M}bit" in c
               for c in cmds2)
    assert any(c.startswith("tc class add dev lab-in") and f"classid 1:101 htb rate {50 * M}bit ceil {50 * M}bit" in c
               for c in cmds2)
    # a peer that did not resolve is left in the common class; the node log says so
    cmds = [" ".join(c) for c in _shape.commands(shape, {"lab-1": "10.0.0.2"})]
    assert not any("classid 1:100" in c for c in cmds)
    assert "out shared per peer (0 of 1 peers without a pair rule resolved)" in _shape.summary(shape, {"lab-1": "10.0.0.2"})
    # an unshaped node has nothing to share; above FAIR_MAX_NODES the render stays O(rules)
    assert shaping.node_shaping(lab(nodes=3, links={"nodes": {2: "50mbit"}}).links, 0, HOSTS) is None
    many = [f"lab-{i}" for i in range(shaping.FAIR_MAX_NODES + 1)]
    big = lab(nodes=len(many), links={"default": "1gbit"}).links
    assert shaping.node_shaping(big, 0, many)["fair"] == []
    assert len(shaping.node_shaping(big, 0, many[:-1])["fair"]) == shaping.FAIR_MAX_NODES - 1


def test_resolve_leaves_out_an_optional_peer_but_not_a_pair_rules(monkeypatch):
    def lookup(host):
        if host == "lab-1":
            return "10.0.0.2"
        raise OSError("Name or service not known")
    monkeypatch.setattr(_shape.socket, "gethostbyname", lookup)
    assert _shape.resolve(["lab-1"], 0.0, ["no-such-host.invalid"]) == {"lab-1": "10.0.0.2"}
    with pytest.raises(_shape.ShapeError, match="a pair rule needs its address"):
        _shape.resolve(["no-such-host.invalid"], 0.0)


def test_the_node_runs_as_the_lab_user_with_no_capability_after_shaping():
    argv = _shape.drop_privileges_argv(["torchrun", "--nnodes=2"])
    assert argv[:6] == ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups",
                        "--inh-caps=-all", "--bounding-set=-all"]
    assert argv[-3:] == ["--", "torchrun", "--nnodes=2"]


def test_a_size_is_said_in_the_largest_unit_it_is_a_whole_number_of():
    from workloads._protocol.links import human_size
    assert [human_size(s) for s in (4 << 20, 1 << 30, 3 << 10, 1000, 1536.0)] == \
        ["4 MiB", "1 GiB", "3 KiB", "1000 B", "1536 B"]
