"""The package's shape, pinned: the layers hold and no module imports itself in a circle.

Read from the source (``ast``), so an import hidden under ``TYPE_CHECKING`` or
inside a function counts as much as one at the top: a cycle that only type
checking sees is still a cycle a reader has to untangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import scheduler

ROOT = Path(scheduler.__file__).parent


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    mods = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        pkg = m if path.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for n in names:
                if n in mods and n != m:
                    graph[m].add(n)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*stack[stack.index(n):], n]
            if n not in state and (found := visit(n)) is not None:
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)) is not None:
            return found
    return None


def _is_package_init(m: str) -> bool:
    return (ROOT.parent / m.replace(".", "/") / "__init__.py").exists()


def test_no_module_imports_itself_in_a_circle() -> None:
    # A package's __init__ re-exporting its modules is not a cycle a reader untangles: leave the
    # edges from an __init__ to its own submodules out.
    graph = {
        m: {n for n in deps if not (_is_package_init(m) and n.startswith(m + "."))}
        for m, deps in _graph().items()
    }
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_domain_imports_no_kafka_and_the_kafka_layer_no_domain() -> None:
    graph = _graph()
    for m, deps in graph.items():
        if m.startswith("scheduler.domain"):
            bad = {d for d in deps if d.startswith(("scheduler.kafka", "scheduler.processor"))}
            assert not bad, f"{m} imports {sorted(bad)}: the domain knows no Kafka"
        if m.startswith("scheduler.kafka"):
            bad = {d for d in deps if d.startswith(("scheduler.domain", "scheduler.processor"))}
            assert not bad, f"{m} imports {sorted(bad)}: the Kafka layer knows no domain"
    for path in (ROOT / "domain").rglob("*.py"):
        tree = ast.parse(path.read_text())
        mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {x for x in mods if x.startswith("confluent_kafka")}, f"{path} imports confluent_kafka"


def test_the_shards_roles_see_no_runtime() -> None:
    """The shard's roles are pure: no module of theirs reaches the Kafka runtime."""
    graph = _graph()
    roles = ["store", "commands", "tick", "lifecycle", "retry_lane", "rearm", "shard", "outputs"]
    for r in roles:
        m = f"scheduler.processor.{r}"
        seen, todo = set(), [m]
        while todo:
            x = todo.pop()
            for d in graph.get(x, ()):
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        bad = {d for d in seen if d in ("scheduler.processor.runtime", "scheduler.processor.restore")}
        assert not bad, f"{m} reaches {sorted(bad)}"


def test_every_command_kind_has_its_row() -> None:
    """Adding a command kind is one vocabulary member and one row in the commands table."""
    from scheduler.processor.commands import CHANGES
    from scheduler.vocabulary import CommandKind

    assert set(CHANGES) | {CommandKind.CREATE} == set(CommandKind)


def test_the_history_mapping_and_stores_import_no_kafka() -> None:
    """Records → rows and the SQL stores are pure of Kafka; only the indexer's loop talks to it."""
    graph = _graph()
    pure = [m for m in graph if m.startswith("scheduler.history.") and m != "scheduler.history.indexer"]
    assert "scheduler.history.mapping" in pure and "scheduler.history.base" in pure
    for m in pure:
        _assert_pure_of_kafka(graph, m)


def _assert_pure_of_kafka(graph: dict[str, set[str]], m: str) -> None:
    """``m`` reaches neither the Kafka layer nor the processor, and imports no confluent_kafka."""
    seen, todo = set(), [m]
    while todo:
        for d in graph.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    bad = {d for d in seen if d.startswith(("scheduler.kafka", "scheduler.processor"))}
    assert not bad, f"{m} reaches {sorted(bad)}"
    path = ROOT.parent / (m.replace(".", "/") + ".py")
    assert "confluent_kafka" not in path.read_text(), f"{path} imports confluent_kafka"


def test_the_reconcilers_expectation_is_pure_and_independent_of_the_processor() -> None:
    """What the reconciler expects and how it judges (docs/reconcile.md) import no Kafka, and nothing
    of the processor: a bug in the processor's arming must show as a gap, not be repeated."""
    graph = _graph()
    for m in ("expect", "account", "lean", "store_source"):
        _assert_pure_of_kafka(graph, f"scheduler.reconcile.{m}")
