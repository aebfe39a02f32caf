"""Checks, from the binaries, that the pinned trace_processor wasm builds have no mutable global but the
stack's: engine/wasm_instance.py's heap image copies linear memory only, so other state would be lost."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pytest
import wasmtime

from traceaug.engine.wasm_module import WASM_SHA256, web_dist_dir

# The exported emscripten functions that only move or bound the stack (whichever a build exports):
# the globals their bodies read or write are the stack's (__stack_pointer, __stack_base, __stack_end).
STACK_FUNCTIONS = (
    "emscripten_stack_init",
    "emscripten_stack_set_limits",
    "emscripten_stack_get_current",
    "emscripten_stack_get_base",
    "emscripten_stack_get_end",
    "emscripten_stack_get_free",
    "_emscripten_stack_restore",
    "_emscripten_stack_alloc",
    "stackSave",
    "stackRestore",
    "stackAlloc",
)
# The stack pointer is found through one of these (each touches it and nothing else of the stack's).
STACK_POINTER_FUNCTIONS = ("emscripten_stack_get_current", "_emscripten_stack_restore", "stackSave",
                           "stackRestore")

VALTYPES = {0x7F: "i32", 0x7E: "i64", 0x7D: "f32", 0x7C: "f64", 0x7B: "v128", 0x70: "funcref",
            0x6F: "externref"}
GLOBAL_KIND = 3  # import / export kind of a global (0 func, 1 table, 2 memory, 4 tag)


# ----- the binary format: LEB128 and sections -----------------------------------------------
def uleb(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 at ``pos``: (value, position after it)."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def sleb(data: bytes, pos: int) -> tuple[int, int]:
    """A signed LEB128 at ``pos``: (value, position after it)."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            if byte & 0x40:
                value -= 1 << shift
            return value, pos


def name(data: bytes, pos: int) -> tuple[str, int]:
    """A length-prefixed UTF-8 name at ``pos``."""
    size, pos = uleb(data, pos)
    return data[pos:pos + size].decode("utf-8"), pos + size


def sections(data: bytes):
    """(id, payload) of each section of the module ``data``, in order."""
    assert data[:8] == b"\0asm\1\0\0\0", f"not a version-1 wasm module: {data[:8]!r}"
    pos = 8
    while pos < len(data):
        section_id = data[pos]
        size, pos = uleb(data, pos + 1)
        yield section_id, data[pos:pos + size]
        pos += size
    assert pos == len(data), "the last section runs past the end of the module"


def skip_limits(data: bytes, pos: int) -> int:
    """Past a table's or memory's limits (flag bit 0: a maximum follows; memory64 sets bit 2)."""
    flags, pos = uleb(data, pos)
    _, pos = uleb(data, pos)
    if flags & 1:
        _, pos = uleb(data, pos)
    if flags & 8:  # custom-page-sizes: log2 of the page size
        _, pos = uleb(data, pos)
    return pos


def valtype(data: bytes, pos: int) -> str:
    code = data[pos]
    assert code in VALTYPES, f"value type 0x{code:02x} at {pos}: not one this parser knows"
    return VALTYPES[code]


def const_expr(data: bytes, pos: int) -> tuple[str, int]:
    """A global's init expression at ``pos`` (constant instructions, ending with 0x0B, decoded so an
    immediate that happens to be 0x0B does not end it): (its text, position after the 0x0B)."""
    parts = []
    while True:
        op = data[pos]
        pos += 1
        if op == 0x0B:
            return " ".join(parts), pos
        if op in (0x41, 0x42):  # i32.const / i64.const
            value, pos = sleb(data, pos)
            parts.append(f"{'i32' if op == 0x41 else 'i64'}.const {value}")
        elif op in (0x43, 0x44):  # f32.const / f64.const
            width = 4 if op == 0x43 else 8
            parts.append(f"{'f32' if op == 0x43 else 'f64'}.const 0x{data[pos:pos + width].hex()}")
            pos += width
        elif op == 0x23:  # global.get
            index, pos = uleb(data, pos)
            parts.append(f"global.get {index}")
        elif op == 0xD2:  # ref.func
            index, pos = uleb(data, pos)
            parts.append(f"ref.func {index}")
        elif op == 0xD0:  # ref.null
            parts.append(f"ref.null 0x{data[pos]:02x}")
            pos += 1
        elif op in (0x6A, 0x6B, 0x6C, 0x7C, 0x7D, 0x7E):  # extended-const add / sub / mul
            parts.append(f"op 0x{op:02x}")
        else:
            raise AssertionError(f"opcode 0x{op:02x} in a constant expression: not one this parser knows")


@dataclass
class Global:
    index: int
    type: str
    mutable: bool
    imported: str | None  # "module.field" of an imported global
    init: str | None  # the init expression of a defined global
    names: list[str] = field(default_factory=list)  # from the name section and the exports

    def describe(self) -> str:
        label = " / ".join(self.names) or "unnamed"
        where = f"imported from {self.imported}" if self.imported else f"init {self.init}"
        return f"global {self.index} ({label}): mut {self.type}, {where}"


@dataclass
class Module:
    globals: list[Global]
    exports: dict[str, tuple[int, int]]  # name -> (kind, index)
    imported_funcs: int
    bodies: list[bytes]  # the code section's function bodies (function index - imported_funcs)


def parse(data: bytes) -> Module:
    """The globals (imported, then defined: the global index space), exports and function bodies of
    the module ``data``, globals named from the name section (subsection 7) and the exports."""
    globals_: list[Global] = []
    exports: dict[str, tuple[int, int]] = {}
    imported_funcs = 0
    bodies: list[bytes] = []
    global_names: dict[int, str] = {}
    for section_id, payload in sections(data):
        if section_id == 2:  # imports
            count, pos = uleb(payload, 0)
            for _ in range(count):
                module, pos = name(payload, pos)
                field_, pos = name(payload, pos)
                kind = payload[pos]
                pos += 1
                if kind == 0:  # function: its type index
                    _, pos = uleb(payload, pos)
                    imported_funcs += 1
                elif kind == 1:  # table: reference type, limits
                    pos = skip_limits(payload, pos + 1)
                elif kind == 2:  # memory
                    pos = skip_limits(payload, pos)
                elif kind == GLOBAL_KIND:
                    globals_.append(Global(len(globals_), valtype(payload, pos), payload[pos + 1] == 1,
                                           f"{module}.{field_}", None))
                    pos += 2
                elif kind == 4:  # tag: attribute byte, type index
                    _, pos = uleb(payload, pos + 1)
                else:
                    raise AssertionError(f"import kind {kind}: not one this parser knows")
            assert pos == len(payload), "the import section did not parse to its end"
        elif section_id == 6:  # globals
            count, pos = uleb(payload, 0)
            for _ in range(count):
                type_, mutability = valtype(payload, pos), payload[pos + 1]
                assert mutability in (0, 1), f"mutability byte {mutability}"
                init, pos = const_expr(payload, pos + 2)
                globals_.append(Global(len(globals_), type_, mutability == 1, None, init))
            assert pos == len(payload), "the global section did not parse to its end"
        elif section_id == 7:  # exports
            count, pos = uleb(payload, 0)
            for _ in range(count):
                export, pos = name(payload, pos)
                kind = payload[pos]
                index, pos = uleb(payload, pos + 1)
                exports[export] = (kind, index)
            assert pos == len(payload), "the export section did not parse to its end"
        elif section_id == 10:  # code: each body prefixed with its size
            count, pos = uleb(payload, 0)
            for _ in range(count):
                size, pos = uleb(payload, pos)
                bodies.append(payload[pos:pos + size])
                pos += size
            assert pos == len(payload), "the code section did not parse to its end"
        elif section_id == 0:
            custom, pos = name(payload, 0)
            if custom != "name":
                continue
            while pos < len(payload):  # subsections: id, size, content
                sub = payload[pos]
                size, pos = uleb(payload, pos + 1)
                if sub == 7:  # global names: a name map
                    count, at = uleb(payload, pos)
                    for _ in range(count):
                        index, at = uleb(payload, at)
                        global_names[index], at = name(payload, at)
                pos += size
    for index, label in global_names.items():
        globals_[index].names.append(label)
    for export, (kind, index) in exports.items():
        if kind == GLOBAL_KIND and export not in globals_[index].names:
            globals_[index].names.append(f"export {export}")
    return Module(globals_, exports, imported_funcs, bodies)


# ----- the stack functions' bodies ------------------------------------------------------------
# The scan decodes instruction by instruction, so an immediate byte that equals 0x23 or 0x24 (e.g. the
# -16 of an alignment mask, or a load offset) is never taken for global.get / global.set. It knows only
# the few instructions emscripten's stack functions are made of (tiny straight-line code: globals, locals,
# constants, integer arithmetic, a call to a stack-overflow handler, a branch); any other opcode fails the
# test loudly rather than being skipped with a guessed immediate size. Calls are not followed: the stack
# functions' own global.get / global.set are the stack's globals.
_NO_IMMEDIATE = {0x00, 0x01, 0x05, 0x0B, 0x0F, 0x1A, 0x1B, *range(0x45, 0xC5)}
_ONE_INDEX = {0x0C, 0x0D, 0x10, 0x20, 0x21, 0x22}  # br, br_if, call, local.get / set / tee
_MEMARG = set(range(0x28, 0x3F))  # loads and stores: alignment, offset


def globals_touched(body: bytes) -> set[int]:
    """The global indices ``body`` (one function body of the code section) reads or writes."""
    groups, pos = uleb(body, 0)
    for _ in range(groups):  # locals: (count, value type) groups
        _, pos = uleb(body, pos)
        valtype(body, pos)
        pos += 1
    touched = set()
    while pos < len(body):
        op = body[pos]
        pos += 1
        if op in (0x23, 0x24):  # global.get / global.set
            index, pos = uleb(body, pos)
            touched.add(index)
        elif op in _NO_IMMEDIATE:
            pass
        elif op in _ONE_INDEX:
            _, pos = uleb(body, pos)
        elif op in (0x41, 0x42):  # i32.const / i64.const
            _, pos = sleb(body, pos)
        elif op in _MEMARG:
            align, pos = uleb(body, pos)
            if align & 0x40:  # multi-memory: a memory index follows
                _, pos = uleb(body, pos)
            _, pos = uleb(body, pos)
        elif op in (0x02, 0x03, 0x04):  # block / loop / if: an empty or value block type
            assert body[pos] == 0x40 or body[pos] in VALTYPES, f"block type 0x{body[pos]:02x}"
            pos += 1
        else:
            raise AssertionError(f"opcode 0x{op:02x} at byte {pos - 1} of a stack function: not one "
                                 "this scan decodes (extend globals_touched)")
    assert body[-1] == 0x0B, "a function body must end with 0x0B"
    return touched


def stack_globals(module: Module) -> dict[str, set[int]]:
    """Each exported stack function's name -> the global indices its body touches."""
    found = {}
    for export in STACK_FUNCTIONS:
        kind, index = module.exports.get(export, (None, None))
        if kind == 0 and index >= module.imported_funcs:
            found[export] = globals_touched(module.bodies[index - module.imported_funcs])
    return found


def unexpected_mutable_globals(data: bytes) -> list[str]:
    """What is wrong with the module ``data`` for a heap image: each mutable global (imported or
    defined) that no stack function touches, described; empty if there is none."""
    module = parse(data)
    touched = stack_globals(module)
    assert "emscripten_stack_init" in touched, "emscripten_stack_init is not exported: not emscripten's?"
    pointer_functions = [f for f in STACK_POINTER_FUNCTIONS if f in touched]
    assert pointer_functions, f"none of {STACK_POINTER_FUNCTIONS} is exported: the stack pointer is unknown"
    for f in pointer_functions:  # each touches exactly the stack pointer, the same global
        assert len(touched[f]) == 1, f"{f} touches globals {sorted(touched[f])}, expected one"
    pointer = touched[pointer_functions[0]]
    assert all(touched[f] == pointer for f in pointer_functions), f"stack pointer unclear: {touched}"
    (sp,) = pointer
    assert module.globals[sp].mutable, f"the stack pointer, global {sp}, is not mutable"
    names = module.globals[sp].names
    assert not names or "__stack_pointer" in names, f"global {sp} is named {names}, not __stack_pointer"
    stack = set().union(*touched.values())
    return [
        f"{g.describe()} is mutable but not the stack's (stack globals {sorted(stack)}, touched by "
        f"{sorted(touched)}): the heap image in engine/wasm_instance.py assumes the state start-up "
        "leaves lives in linear memory only, so this global's value would be lost"
        for g in module.globals if g.mutable and g.index not in stack
    ]


# ----- the pinned builds ------------------------------------------------------------------------
def pinned(build: str) -> bytes:
    data = (web_dist_dir() / build).read_bytes()
    assert hashlib.sha256(data).hexdigest() == WASM_SHA256[build], f"{build} is not the pinned build"
    return data


@pytest.mark.parametrize("build", sorted(WASM_SHA256))
def test_pinned_build_mutable_globals_are_the_stacks(build):
    data = pinned(build)
    module = parse(data)
    mutable = [g for g in module.globals if g.mutable]
    assert mutable, f"{build}: no mutable global at all, not even the stack pointer"
    problems = unexpected_mutable_globals(data)
    assert not problems, f"{build}:\n" + "\n".join(problems)
    # global 0 of an emscripten build is __stack_pointer, and the stack functions agree
    assert module.globals[0].mutable and "__stack_pointer" in module.globals[0].names, \
        module.globals[0].describe()
    touched = stack_globals(module)
    assert touched["emscripten_stack_get_current"] == {0}
    # exactly: every global the stack functions touch is one of the mutable ones
    assert {g.index for g in mutable} == set().union(*touched.values()), touched


# ----- the check can fail ------------------------------------------------------------------------
def synthetic(extra: str, ptr: str = "i32") -> bytes:
    """A small emscripten-shaped module: a stack pointer and stack end moved by exported stack functions
    (with constants whose bytes are 0x23 / 0x24, which a plain byte scan would take for global
    instructions), a constant global, and ``extra`` spliced in among its fields."""
    return wasmtime.wat2wasm(f"""
    (module
      {extra}
      (global $__stack_pointer (mut {ptr}) ({ptr}.const 65536))
      (global $__stack_end (mut {ptr}) ({ptr}.const 0))
      (global $__heap_base {ptr} ({ptr}.const 131072))
      (memory (export "memory") {'i64 ' if ptr == 'i64' else ''}2)
      (func (export "emscripten_stack_init")
        {ptr}.const 35 drop {ptr}.const 36 {ptr}.load offset=35 drop
        {ptr}.const 1024 global.set $__stack_end)
      (func (export "emscripten_stack_get_current") (result {ptr}) global.get $__stack_pointer)
      (func (export "_emscripten_stack_restore") (param {ptr}) local.get 0 global.set $__stack_pointer)
      (func (export "_emscripten_stack_alloc") (param {ptr}) (result {ptr}) (local {ptr})
        global.get $__stack_pointer local.get 0 {ptr}.sub {ptr}.const -16 {ptr}.and local.tee 1
        global.set $__stack_pointer local.get 1)
      (func (export "emscripten_stack_get_free") (result {ptr})
        global.get $__stack_pointer global.get $__stack_end {ptr}.sub)
    )""")


@pytest.mark.parametrize("ptr", ["i32", "i64"])
def test_synthetic_module_without_extra_state_passes(ptr):
    data = synthetic("", ptr)
    assert unexpected_mutable_globals(data) == []
    module = parse(data)
    assert stack_globals(module) == {
        "emscripten_stack_init": {1}, "emscripten_stack_get_current": {0}, "_emscripten_stack_restore": {0},
        "_emscripten_stack_alloc": {0}, "emscripten_stack_get_free": {0, 1}}
    assert [(g.names, g.mutable) for g in module.globals] == [
        (["__stack_pointer"], True), (["__stack_end"], True), (["__heap_base"], False)]


@pytest.mark.parametrize("ptr", ["i32", "i64"])
@pytest.mark.parametrize(("extra", "index", "label"), [
    ("(global $rpc_state (mut i32) (i32.const 0)) (func (export \"bump\") global.get $rpc_state "
     "i32.const 1 i32.add global.set $rpc_state)", 0, "rpc_state"),
    ("(global $exported_state (export \"state\") (mut i64) (i64.const 11))", 0, "exported_state"),
    ("(import \"env\" \"tls\" (global $imported_state (mut i32)))", 0, "imported_state"),
])
def test_extra_mutable_global_is_reported(ptr, extra, index, label):
    data = synthetic(extra, ptr)
    problems = unexpected_mutable_globals(data)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"global {index} ({label}"), problems[0]
    assert "heap image in engine/wasm_instance.py" in problems[0]
