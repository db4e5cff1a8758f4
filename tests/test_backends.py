"""labctl/backends/__init__.py, the registry: backends as packages that nothing below
imports, typed options that are the CLI's flags, and the verbs every backend must have."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import import_graph
from conftest import REPO
from labctl import backends, cli
from labctl.backends.base import Backend, BackendOptions, OptionRefused, option
from subprocess_backend import SubprocessBackend

BACKEND_PACKAGES = ("local", "compose", "k8s")


def _imports() -> dict[str, set[str]]:
    return import_graph.imports(REPO, ("labctl",))


def test_nothing_below_a_backend_imports_it_and_no_backend_imports_another():
    graph = _imports()
    for package in BACKEND_PACKAGES:
        prefix = f"labctl.backends.{package}"
        importers = {m for m, targets in graph.items() for t in targets
                     if t == prefix or t.startswith(prefix + ".")}
        assert {m for m in importers if not (m == prefix or m.startswith(prefix + "."))} == set(), \
            f"only {prefix} itself imports its modules (the registry names it by path)"
    # what the backends stand on: everything they import, transitively, but the backends'
    # own registry and interface
    below: set[str] = set()
    todo = [t for m, targets in graph.items() if m.startswith("labctl.backends.") for t in targets]
    while todo:
        m = todo.pop()
        if m.startswith("labctl.backends") or m in below:
            continue
        below.add(m)
        todo += graph[m]
    assert {"labctl.spec", "labctl.plan", "labctl.rendered"} <= below
    assert {m: sorted(t for t in graph[m] if t.startswith("labctl.backends")) for m in below} == \
        {m: [] for m in below}


@dataclass(frozen=True)
class TunnelOptions(BackendOptions):
    context: str | None = option("where the tunnel goes")     # the k8s backend has --context too
    hops: int | None = option("tunnel hops")


class TunnelBackend(SubprocessBackend):
    name = "tunnel"
    Options = TunnelOptions


@dataclass(frozen=True)
class ClashOptions(BackendOptions):
    context: int | None = option("a context that is a number")


class ClashBackend(SubprocessBackend):
    name = "clash"
    Options = ClashOptions


def test_a_backends_typed_options_are_its_flags_and_its_instance_gets_them_typed(monkeypatch):
    monkeypatch.setitem(backends.REGISTRY, "tunnel", "test_backends:TunnelBackend")
    flags = backends.all_options()
    assert flags["hops"] == backends.Flag("hops", int, "tunnel hops", ("tunnel",))
    assert flags["context"].type is str and flags["context"].backends == ("k8s", "tunnel")

    @click.command()
    @cli.backend_options
    def command(**given):
        click.echo(repr(backends.options_for("tunnel", given)))

    given = CliRunner().invoke(command, ["--hops", "3", "--context", "c"])
    assert given.exit_code == 0 and given.output.strip() == repr(TunnelOptions(context="c", hops=3))
    assert "--hops INTEGER" in CliRunner().invoke(command, ["--help"]).output
    wrong = CliRunner().invoke(command, ["--hops", "three"])
    assert wrong.exit_code == 2 and "'three' is not a valid integer" in wrong.output
    assert backends.create("tunnel", options=TunnelOptions(hops=3)).options.hops == 3
    assert backends.create("tunnel").options == TunnelOptions()

    with pytest.raises(OptionRefused) as refused:
        backends.options_for("k8s", {"hops": 3, "namespace": None})
    assert str(refused.value) == "--hops applies to the tunnel backend, not k8s"
    assert refused.value.exit_code == 2
    assert backends.options_for("local", {"context": None, "hops": None}) == BackendOptions()
    with pytest.raises(TypeError, match="takes BackendOptions, given TunnelOptions"):
        backends.create("local", options=TunnelOptions())

    monkeypatch.setitem(backends.REGISTRY, "clash", "test_backends:ClashBackend")
    with pytest.raises(TypeError, match="--context: str for k8s, tunnel but int for clash"):
        backends.all_options()


def test_a_backend_without_a_verb_every_backend_needs_cannot_be_made():
    class NoCollect(Backend):
        name = "no-collect"

        def placement(self, spec, run_folder=None):
            raise AssertionError

        def submit(self, plan, rundir):
            raise AssertionError

        def describe(self, within=0.0, joins=False):
            raise AssertionError

        def signal(self, action):
            return []

        def delete(self):
            return ""

    with pytest.raises(TypeError, match="abstract method stream"):
        NoCollect()
    assert sorted(Backend.__abstractmethods__) == ["delete", "describe", "placement", "signal",
                                                   "stream", "submit"]


def test_labctl_render_finds_every_renderer_through_the_registry():
    assert backends.render_targets() == ("plan", "compose", "k8s")
    for name in ("compose", "k8s"):
        module = backends.backend_class(name).renderer
        assert module == f"labctl.backends.{name}.render"
        assert Path(REPO, *module.split(".")).with_suffix(".py").is_file()
