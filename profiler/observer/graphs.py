"""Attention inside ``torch.compile``d graphs: read once when a graph is compiled, counted each time it runs.

A compiled graph runs without Python, so the interceptor (profiler.observer.hooks) never sees the
attention calls inside it. While an observation runs, TorchDynamo's call of the backend
(``OutputGraph.call_user_compiler``, which every backend goes through: inductor, cudagraphs,
aot_eager, a user's own) is wrapped:

- before the backend compiles a graph, :func:`read_graph` finds its attention nodes
  (``F.scaled_dot_product_attention`` calls and FlexAttention's higher-order op) and keeps what
  each computes: the fake example values of q, k and v (sizes and strides, symbolic under dynamic
  shapes, dtype, whether a gradient is needed), the mask arguments (``is_causal``, ``attn_mask``, the
  block mask's tensors; K/V heads are read off k's size, as eager calls read them) and
  ``nn_module_stack``, the module path the call was made from;
- the compiled function the backend returns is wrapped in :class:`ObservedGraph`. Called during an
  observation, it binds the graph's size symbols to its inputs' sizes, turns each node into the
  :class:`~profiler.observer.calls.Call` an eager run of the same code would have made (so the row
  keys, shapes and FLOPs are the same, compiled or not), and records them; when autograd runs the
  graph's backward (its ``CompiledFunctionBackward`` node), each node that needed a gradient is
  recorded in mode ``bwd``. Called outside an observation, it only calls the compiled function.

Times come from the torch profiler's trace (``trace='torch'`` on a GPU): each graph run and each
backward run is a ``record_function`` range (and an NVTX range), and the attention kernels inside it
are told apart, in launch order, as the kernels of one attention operator (the SDPA kernels the
compiler calls as ATen operators) or one FlexAttention template kernel (the Triton template Inductor
makes for it, ``triton_tem_fused_flex_attention...``, with the backward's preprocessing kernel before
it); the k-th one is charged to the graph's k-th attention node
(the last one first in a backward). Where the two counts differ (CUDA graphs replay kernels without
their operators; a compiler that decomposes attention into matmuls leaves no attention kernel), the
calls are counted and costed but not timed, and the run says so. CUDA events around a graph or the CPU
clock would time the whole graph, not its attention, so with those clocks compiled calls are untimed.

Graphs compiled before an observation began are not wrapped, unless dynamo compiles them again inside
it: a graph that calls ``F.scaled_dot_product_attention`` guards on that name, which the observation
rebinds (profiler.observer.hooks). Graphs compiled during an observation stay wrapped after it and
record again in a later one. One observation runs at a time in a process (``_ACTIVE``); calls from
every thread are recorded into it. Attention inside a sub-graph (activation checkpointing) is counted
as not read. The k-th attention kernel of a graph run is charged to its k-th attention node: a compiler
that reorders two independent attention calls would swap their times.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import re
from dataclasses import dataclass, field

import nvtx
import torch

from profiler.measure.ranges import DOMAIN, OBSERVE
from profiler.observer import calls as describe
from profiler.observer import sites

# The graph's ATen attention operators as the torch profiler names them (forward and backward):
# their kernels are one call's. FlexAttention compiles to a Triton template kernel instead.
ATTENTION_OP = re.compile(r"^aten::_(scaled_dot_product|flash_attention|efficient_attention|cudnn_attention)")
FLEX_KERNEL = re.compile(r"flex_attention")
# Inductor's template kernels are triton_tem_*: FlexAttention's forward and backward, one per call.
FLEX_TEMPLATE = re.compile(r"tem_\w*flex_attention")
GRAPH = f"{OBSERVE}/compiled"


def _sdpa_signature(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False):
    """F.scaled_dot_product_attention's parameters (torch.nn.functional docs), to bind a node's arguments."""


def _flex_signature(query, key, value, score_mod, block_mask, scale, kernel_options, score_mod_other_buffers=(),
                    mask_mod_other_buffers=()):
    """FlexAttention's higher-order op (torch._higher_order_ops.flex_attention.FlexAttentionHOP)."""


_SIGNATURES = {"sdpa": inspect.signature(_sdpa_signature), "flex_attention": inspect.signature(_flex_signature)}


def _attention_api(node) -> str | None:
    if node.op != "call_function":
        return None
    if node.target is torch._C._nn.scaled_dot_product_attention:  # F.scaled_dot_product_attention is this builtin
        return "sdpa"
    if getattr(node.target, "__name__", None) == "flex_attention" and type(node.target).__name__ == "FlexAttentionHOP":
        return "flex_attention"
    return None


# ---------------------------------------------------------------- sizes, symbolic or not


def _expr(value):
    """An int, or the sympy expression of a SymInt."""
    if isinstance(value, torch.SymInt):
        expr = value.node.expr
        return int(expr) if expr.is_number else expr
    return int(value)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument as the graph saw it: sizes and strides (ints or sympy expressions)."""

    shape: tuple
    stride: tuple
    dtype: torch.dtype
    requires_grad: bool
    placeholder: int | None  # the graph input it is, if it is one (its runtime value can be read)

    @classmethod
    def of(cls, node, placeholders: dict) -> TensorSpec | None:
        value = node.meta.get("example_value") if hasattr(node, "meta") else None
        if not isinstance(value, torch.Tensor):
            return None
        return cls(tuple(_expr(s) for s in value.shape), tuple(_expr(s) for s in value.stride()), value.dtype,
                   bool(value.requires_grad), placeholders.get(node))

    def meta(self, bind) -> torch.Tensor:
        """A meta tensor with the sizes and strides of this run (``bind`` evaluates expressions)."""
        return torch.empty_strided([bind(s) for s in self.shape], [bind(s) for s in self.stride], dtype=self.dtype,
                                   device="meta")

    @property
    def symbols(self) -> set:
        return {s for e in (*self.shape, *self.stride) if not isinstance(e, int) for s in e.free_symbols}


@dataclass
class AttentionNode:
    """One attention node of a graph and what its Call needs."""

    api: str
    q: TensorSpec
    k: TensorSpec
    v: TensorSpec
    module_path: str  # its path under the compiled module ('' at the compiled function's own level)
    code_line: str  # file:line of the call in the user's code (nn_module_stack's fallback, as call_site's)
    is_causal: bool = False
    mask: MaskSource | None = None  # sdpa's attn_mask
    block: tuple | None = None  # flex: (kv_num_blocks, full_kv_num_blocks or None, block_q, block_kv) specs

    @property
    def needs_grad(self) -> bool:
        return self.q.requires_grad or self.k.requires_grad or self.v.requires_grad

    @property
    def symbols(self) -> set:
        return set().union(self.q.symbols, self.k.symbols, self.v.symbols)


def _module_path(node) -> str:
    """The innermost module of ``nn_module_stack`` as a path under the compiled one: dynamo writes
    ``L['self'].layers.0.attn`` (or ``L['args'][0]...`` for ``model.compile()``); the root is dropped."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    path = re.sub(r"^L(\[[^\]]*\])+\.?", "", path) if isinstance(path, str) else ""
    return re.sub(r"\[(\d+)\]", r".\1", path).replace("._orig_mod", "").removeprefix("_orig_mod.")


def _code_line(node) -> str:
    """The innermost user frame of the node's stack trace, as ``file:line`` (sites.call_site's form)."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    for filename, line in reversed(frames):
        if not filename.startswith(sites.SKIP):
            return f"{filename.rsplit('/', 1)[-1]}:{line}"
    return "<compiled>"


def _mutates(node) -> bool:
    """Whether an FX node writes to a tensor, so running it again is not free of side effects: an
    in-place method (``add_``) or torch function (``torch.relu_``), an ATen overload whose schema writes
    an argument, an in-place operator (``operator.iadd``; ``operator.and_`` is not one), or a node FX
    itself calls impure."""
    import operator

    if node.op in ("placeholder", "get_attr", "output"):
        return False
    name = str(node.target if isinstance(node.target, str) else getattr(node.target, "__name__", ""))
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    if getattr(node.target, "__module__", None) in ("_operator", "operator"):
        return (name.startswith("i") and (hasattr(operator, name[1:]) or hasattr(operator, name[1:] + "_"))
                and name not in ("index", "indexOf", "invert", "is_", "is_not", "itemgetter"))
    try:
        if node.is_impure():
            return True
    except Exception:  # noqa: BLE001 - an FX without the check: the name decides
        pass
    return name.endswith("_") and not name.endswith("__")


class MaskSource:
    """Where an attn_mask's values come from at run time: a graph input, or the nodes of the graph that
    compute it (transformers builds its causal mask inside the compiled forward), copied into a graph
    of their own and run on the same inputs, under no_grad, once per distinct input (cached as
    eager masks are: by the inputs' storage and version)."""

    def __init__(self, module, inputs: list[int]):
        self.module = module  # None: the mask is input ``inputs[0]``
        self.inputs = inputs
        self._cache = describe.PerTensor(limit=64)

    @classmethod
    def of(cls, node, placeholders: dict) -> MaskSource:
        if node.op == "placeholder":
            return cls(None, [placeholders[node]])
        needed, stack = set(), [node]
        while stack:
            current = stack.pop()
            if current not in needed:
                needed.add(current)
                stack.extend(current.all_input_nodes)
        changes = [n for n in needed if n.op != "placeholder" and _mutates(n)]
        if changes:  # running them again would change the user's tensors
            raise ValueError(f"an attn_mask made inside the graph by in-place operations ({changes[0].name})")
        graph, env = torch.fx.Graph(), {}
        for current in node.graph.nodes:  # topological order
            if current in needed:
                env[current] = graph.node_copy(current, lambda n: env[n])
        graph.output(env[node])
        inputs = [placeholders[n] for n in node.graph.nodes if n in needed and n.op == "placeholder"]
        return cls(torch.fx.GraphModule(node.graph.owning_module, graph), inputs)

    def kind(self, args, scores_shape: tuple) -> tuple[str, float, int]:
        """calls.explicit_mask of this run's mask: (kind, kept fraction, bytes). A mask made in the graph
        is made again here only when its inputs changed (calls.PerTensor: the same live tensors at the
        same versions, and the same other values), and the mask itself is not kept."""
        values = [args[i] for i in self.inputs]
        if self.module is None:
            return describe.explicit_mask(values[0], scores_shape)
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        extra = tuple(v for v in values if not isinstance(v, torch.Tensor)) + (tuple(scores_shape),)
        found = self._cache.get(tensors, extra)
        if found is None:
            with torch.no_grad():
                found = describe.classify_mask(self.module(*values), scores_shape)
            self._cache.put(tensors, extra, found)
        return found


# ---------------------------------------------------------------- reading a graph


@dataclass
class GraphSpec:
    """What an observation needs of one compiled graph: its attention nodes and how to bind its sizes."""

    name: str
    nodes: list[AttentionNode]
    bindings: dict  # sympy symbol -> (placeholder index, 'value' | dim index)
    unread: list[str] = field(default_factory=list)  # attention nodes it could not read, and why
    calls: dict = field(default_factory=dict)  # binding values -> the nodes' Calls (masks aside)


def read_graph(gm, name: str) -> GraphSpec:
    """The attention nodes of a dynamo FX graph (module docstring)."""
    placeholder_nodes = list(gm.graph.find_nodes(op="placeholder"))
    placeholders = {node: i for i, node in enumerate(placeholder_nodes)}
    bindings: dict = {}
    for i, node in enumerate(placeholder_nodes):
        value = node.meta.get("example_value")
        if isinstance(value, torch.SymInt) and not isinstance(_expr(value), int) and _expr(value).is_symbol:
            bindings.setdefault(_expr(value), (i, "value"))
        elif isinstance(value, torch.Tensor):
            for d, size in enumerate(value.shape):
                expr = _expr(size)
                if not isinstance(expr, int) and expr.is_symbol:
                    bindings.setdefault(expr, (i, d))
    nodes, unread = [], []
    for node in gm.graph.nodes:
        unread += [f"{api} inside a sub-graph of a compiled graph ({getattr(node.target, '__name__', node.target)}:"
                   " activation checkpointing or another higher-order op; not read)" for api in _nested(gm, node)]
        api = _attention_api(node)
        if api is None:
            continue
        try:
            nodes.append(_read_node(api, node, placeholders))
        except Exception as err:  # an argument form we do not read: the node is counted as unread
            unread.append(f"{api} in a compiled graph ({type(err).__name__}: {err})")
    spec = GraphSpec(name, nodes, bindings, unread)
    missing = set().union(*(n.symbols for n in nodes)) - set(bindings) if nodes else set()
    if missing:  # a size we cannot bind from the inputs: the graph's nodes are not read
        spec.unread += [f"{n.api} in a compiled graph (sizes {sorted(map(str, missing))} not bound to an input)"
                        for n in nodes]
        spec.nodes = []
    return spec


def _nested(gm, node) -> list[str]:
    """The attention APIs called inside the sub-graphs a node runs (``torch.utils.checkpoint`` in a
    compiled graph is a higher-order op over a sub-graph, reached through get_attr), recursively."""
    found = []
    for arg in node.args:
        if getattr(arg, "op", None) != "get_attr":
            continue
        sub = getattr(gm, arg.target, None)
        if isinstance(sub, torch.fx.GraphModule):
            for inner in sub.graph.nodes:
                api = _attention_api(inner)
                found += [api] if api else _nested(sub, inner)
    return found


def _read_node(api: str, node, placeholders: dict) -> AttentionNode:
    bound = _SIGNATURES[api].bind(*node.args, **node.kwargs)
    bound.apply_defaults()
    a = bound.arguments
    q, k, v = (TensorSpec.of(a[name], placeholders) for name in ("query", "key", "value"))
    if q is None or k is None or v is None:
        raise ValueError("q, k or v has no example value")
    out = AttentionNode(api, q, k, v, _module_path(node), _code_line(node))
    if api == "sdpa":
        out.is_causal = bool(a["is_causal"])
        mask = a["attn_mask"]
        if mask is not None:
            if not hasattr(mask, "meta"):
                raise ValueError(f"an attn_mask that is not a tensor ({type(mask).__name__})")
            out.mask = MaskSource.of(mask, placeholders)
    else:
        block = a["block_mask"]
        first = next(i for i, item in enumerate(block) if hasattr(item, "meta"))
        ints = [item for item in block[:-1] if isinstance(item, (int, torch.SymInt)) and not isinstance(item, bool)]
        kv_num, full_num = block[first], block[first + 2]
        specs = [TensorSpec.of(t, placeholders) if t is not None else None for t in (kv_num, full_num)]
        if specs[0] is None or specs[0].placeholder is None or (full_num is not None and
                                                                (specs[1] is None or specs[1].placeholder is None)):
            raise ValueError("a block mask made inside the graph (its block counts are not inputs)")
        out.block = (specs[0], specs[1], _expr(ints[-2]), _expr(ints[-1]))
    return out


# ---------------------------------------------------------------- one run of a graph


def _bind(spec: GraphSpec, args) -> tuple[tuple, callable]:
    """(the binding values of this run, a function evaluating a size expression with them)."""
    values = [int(args[i]) if where == "value" else int(args[i].shape[where]) for i, where in spec.bindings.values()]
    lookup = dict(zip(spec.bindings, values))

    def bind(expr) -> int:
        return expr if isinstance(expr, int) else int(expr.xreplace(lookup))
    return tuple(values), bind


_DENSITIES = describe.PerTensor()


def _block_density(node: AttentionNode, args, seq_kv: int) -> float:
    """FlexAttention's computed-block fraction from the block mask's input tensors, counted as eager
    calls count it (calls.block_fraction). Cached per live tensor and version (one sync per mask)."""
    kv_num, full_num, _, block_kv = node.block
    tensors = [args[kv_num.placeholder]] + ([args[full_num.placeholder]] if full_num is not None else [])
    found = _DENSITIES.get(tensors, (seq_kv, block_kv))
    if found is None:
        found = describe.block_fraction(tensors, seq_kv, block_kv)
        _DENSITIES.put(tensors, (seq_kv, block_kv), found)
    return found


def node_calls(spec: GraphSpec, args) -> list[describe.Call]:
    """The Calls this run of the graph makes, one per attention node, in graph order."""
    key, bind = _bind(spec, args)
    cached = spec.calls.get(key)
    if cached is None:
        if len(spec.calls) >= 256:  # a dynamic graph serving ever new sizes (decode): keep the cache bounded
            spec.calls.clear()
        cached = spec.calls[key] = [None if n.mask or n.block else _call(n, bind) for n in spec.nodes]
    out = []
    for node, call in zip(spec.nodes, cached):
        if call is None:
            q, k, v = (node.q.meta(bind), node.k.meta(bind), node.v.meta(bind))
            if node.api == "sdpa":
                kind, density, nbytes = node.mask.kind(args, (*q.shape[:-1], k.shape[-2]))
                call = describe.sdpa_call(q, k, v)._replace(mask=kind, density=density, mask_bytes=nbytes)
            else:
                call = describe.flex_call(q, k, v)._replace(
                    mask="block", density=_block_density(node, args, k.shape[-2]))
        out.append(call)
    return out


def _call(node: AttentionNode, bind) -> describe.Call:
    q, k, v = (node.q.meta(bind), node.k.meta(bind), node.v.meta(bind))
    if node.api == "sdpa":
        return describe.sdpa_call(q, k, v, is_causal=node.is_causal)
    return describe.flex_call(q, k, v)


# ---------------------------------------------------------------- the observer


class GraphObserver:
    """Wraps dynamo's backend call while an observation runs (:meth:`install`, :meth:`remove`) and
    records the attention nodes of the graphs it wrapped (:meth:`run`)."""

    def __init__(self, recorder):
        self.recorder = recorder
        self.graphs = 0  # graphs compiled during the observation that hold attention
        self.untimed_reason = ""  # why compiled calls have no time with this clock (empty: from the trace)
        self._original = None
        self._ids = itertools.count()
        self._domain = nvtx.get_domain(DOMAIN)

    def install(self) -> None:
        global _ACTIVE
        try:
            from torch._dynamo.output_graph import OutputGraph
        except ImportError:  # a torch without dynamo: nothing is compiled
            return
        original = OutputGraph.call_user_compiler
        if getattr(original, "__attention_roofline_wrapped__", False):
            return  # an observation is already running
        observer = self

        @functools.wraps(original)
        def call_user_compiler(graph, gm, *args, **kwargs):  # (gm, example_inputs) now; (gm) in older torch
            if _inside_eager_call():  # eager FlexAttention's own graph: the interceptor counts its call
                return original(graph, gm, *args, **kwargs)
            spec = None
            try:
                spec = read_graph(gm, f"graph {getattr(graph, 'dynamo_compile_id', '') or next(observer._ids)}")
            except Exception as err:  # never stop a compile: the graph is counted as unread
                observer.recorder.not_understood(f"a compiled graph ({type(err).__name__}: {err})")
            compiled = original(graph, gm, *args, **kwargs)
            if spec is None or not (spec.nodes or spec.unread):
                return compiled
            observer.graphs += bool(spec.nodes)
            return ObservedGraph(spec, _eager_forward(compiled))

        call_user_compiler.__attention_roofline_wrapped__ = True
        self._original = original
        OutputGraph.call_user_compiler = call_user_compiler
        _ACTIVE.observer = self

    def remove(self) -> None:
        if self._original is not None:
            from torch._dynamo.output_graph import OutputGraph

            OutputGraph.call_user_compiler = self._original
            self._original = None
        if _ACTIVE.observer is self:
            _ACTIVE.observer = None

    def run(self, spec: GraphSpec, compiled, args):
        """One run of a wrapped graph: its calls recorded, the run in a range, its backward hooked. The
        bookkeeping never stops the user's step: where it fails, the graph runs unobserved and the
        failure is counted among the calls not understood."""
        recorder = self.recorder
        for reason in spec.unread:
            recorder.not_understood(reason)
        if not spec.nodes:
            return compiled(*args)
        try:
            rows, on_gpu = self._record(spec, args), any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
            opened = self._open(spec, "fwd", [r[3] for r in rows if r[3] is not None], on_gpu)
        except Exception as err:  # noqa: BLE001 - the run goes on unobserved
            for node in spec.nodes:
                recorder.not_understood(f"{node.api} in a compiled graph ({type(err).__name__}: {err})")
            return compiled(*args)
        before = {id(a.grad_fn) for a in args if isinstance(a, torch.Tensor) and a.grad_fn is not None}
        try:
            out = compiled(*args)
        finally:
            self._close(opened)
        graded = [r for r in rows if r[0].needs_grad and r[3] is not None]
        if graded and torch.is_grad_enabled():
            try:
                self._time_backward(spec, graded, out, on_gpu, before)
            except Exception as err:  # noqa: BLE001 - the backward runs untimed and uncounted
                recorder.not_understood(f"a compiled graph's backward ({type(err).__name__}: {err})")
        return out

    def _record(self, spec: GraphSpec, args) -> list[tuple]:
        found = sites.graph_sites(4)  # the graph's caller: above run() and ObservedGraph.__call__
        rows = []
        for node, call in zip(spec.nodes, node_calls(spec, args)):
            site = sites.join(found, node.module_path, node.code_line)
            rows.append((node, call, site, self.recorder.row_for(call, site, "fwd")))
        return rows

    def _open(self, spec: GraphSpec, mode: str, rows: list, on_gpu: bool):
        name = f"{GRAPH}/{mode}/{spec.name}"
        self._domain.push_range(message=name)
        record = None
        if self.recorder.clock == "trace" and on_gpu:
            unique = f"{name}#{next(self._ids)}"
            record = torch.profiler.record_function(unique)
            record.__enter__()
            self.recorder.graph_started(unique, rows)
        else:
            self.untimed_reason = ("calls on the CPU are timed per call, which a compiled graph does not make"
                                   if not on_gpu else f"--trace {'nsys' if self.recorder.clock == 'nsys' else 'none'}"
                                   " times whole graphs; --trace torch times each attention kernel inside them")
        if self.recorder.on_call is not None:
            self.recorder.on_call()
        return record

    def _close(self, record) -> None:
        if record is not None:
            record.__exit__(None, None, None)
        self._domain.pop_range()

    def _time_backward(self, spec: GraphSpec, rows: list, out, on_gpu: bool, before: set) -> None:
        """Each run of the graph's backward (a retained graph may run it again) records its rows in mode
        bwd, in a range from the node's pre-hook to its post-hook."""
        node = _compiled_backward_node(out, before)
        if node is None:  # a backend without AOTAutograd (backend="eager") leaves eager autograd nodes
            for _, call, _, _ in rows:
                self.recorder.not_understood(f"{call.api} backward of a graph compiled without AOTAutograd "
                                             "(backend='eager'): not counted")
            return
        state = {"open": None}

        def start(grad_outputs):
            if state["open"] is None:
                stats = [self.recorder.row_for(call, site, "bwd") for _, call, site, _ in rows]
                state["open"] = (self._open(spec, "bwd", list(reversed([s for s in stats if s is not None])),
                                            on_gpu),)

        def done(grad_inputs, grad_outputs):
            if state["open"] is not None:
                self._close(state["open"][0])
                state["open"] = None

        node.register_prehook(start)
        node.register_hook(done)


def _eager_forward(compiled):
    """The function a backend returned, with a lazily compiled GraphModule (``backend="eager"`` returns
    its ``_lazy_forward``) made real first, as dynamo does, so the wrapper is what runs."""
    try:
        from torch.fx._lazy_graph_module import _LazyGraphModule
    except ImportError:
        return compiled
    lazy = compiled if isinstance(compiled, _LazyGraphModule) else getattr(compiled, "__self__", None)
    if isinstance(lazy, _LazyGraphModule):
        _LazyGraphModule.force_recompile(lazy)
        return lazy.forward
    return compiled


def _compiled_backward_node(out, before: set):
    """The autograd node of this run's compiled backward: an output's grad_fn, or the first node behind
    it (an output that is a view has a view node before it), never one that was the grad_fn of an
    input (``before``: an output that is a view of an input leads back to an earlier graph's node)."""
    tensors = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
    level = [t.grad_fn for t in tensors if t.grad_fn is not None]
    for _ in range(4):  # breadth first, a few levels
        for node in level:
            if id(node) not in before and "CompiledFunction" in type(node).__name__:
                return node
        level = [n for node in level if id(node) not in before for n, _ in node.next_functions if n is not None]
    return None


class ObservedGraph:
    """A compiled function and its attention nodes: recorded while an observation runs."""

    def __init__(self, spec: GraphSpec, compiled):
        self.spec = spec
        self.compiled = compiled
        self.__wrapped__ = compiled

    def __call__(self, *args):
        observer = _ACTIVE.observer
        if observer is None or _inside_eager_call():
            return self.compiled(*args)
        return observer.run(self.spec, self.compiled, args)

    def __getattr__(self, name):  # attributes dynamo or inductor read off the compiled function
        if name.startswith("__"):  # not __self__ or __name__: dynamo would unwrap a lazy forward through them
            raise AttributeError(name)
        return getattr(self.compiled, name)


class _Active:
    observer: GraphObserver | None = None


_ACTIVE = _Active()


def _inside_eager_call() -> bool:
    """True inside an intercepted eager call (eager FlexAttention compiles and runs a graph of its own)."""
    from profiler.observer.hooks import inside_observed_call

    return inside_observed_call()

