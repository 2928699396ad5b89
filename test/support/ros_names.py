"""The ROS 2 Python names a module uses, read with ``ast``: rclpy's, rcl_interfaces', launch's and
launch_ros' (test/unit/test_humble_api.py checks each against what Humble has).

A name is recorded by its import path and the attributes reached from it, for example
``rclpy.lifecycle.LifecycleNode.create_timer``, and each keyword passed to a ROS callable as
``rclpy.lifecycle.LifecycleNode.create_timer(callback_group=)``. To know what an expression is,
the reader follows imports; ``self`` and ``super()`` in a class built on a ROS class (an
attribute the class does not define is its base's, and a method it defines that the base has
overrides the base's); annotations, of parameters and of the product's own attributes (a
container's items too); assignments; the return annotations of the product's methods; and what
ROS callables return, which the caller gives (``results``: no source says it in a form ``ast``
reads). Keywords a product function hands on with ``**kwargs`` count as the ROS callable's.

Where it cannot tell what an object is, an attribute whose name some class of the installed
rclpy or rcl_interfaces defines is recorded as ``?.<name>``: the check wants that name checked
on some owner, so a new call on an untyped object is not missed either.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

#: The packages whose names are recorded.
ROOTS = ("rclpy", "rcl_interfaces", "launch", "launch_ros")
#: The owner recorded for an attribute of an object of unknown type.
UNTYPED = "?"
#: Container annotations: iterating them gives their first argument (a mapping: its keys).
_SEQUENCES = {"list", "tuple", "set", "frozenset", "Iterator", "Iterable", "Sequence", "Collection"}
_MAPPINGS = {"dict", "Mapping", "MutableMapping"}
#: Builtins whose result holds what their argument holds.
_PASS_THROUGH = {"list", "tuple", "sorted", "iter", "reversed"}


@dataclasses.dataclass(frozen=True)
class Ros:
    """A ROS package's name, or an object of that type: ``rclpy.qos.QoSProfile``."""

    name: str


@dataclasses.dataclass(frozen=True)
class Own:
    """An instance of a class of the product's (``self`` in its methods)."""

    cls: str


@dataclasses.dataclass(frozen=True)
class Super:
    """``super()`` in a method of the product's class ``cls``."""

    cls: str


class Foreign:
    """Known not to be ROS's: the standard library, numpy, a class of the product's other modules."""


FOREIGN = Foreign()


@dataclasses.dataclass(frozen=True)
class Many:
    """A container: ``list[Subscription]``, ``dict[str, _Camera]``."""

    item: Kind  # what iterating gives: a list's items, a mapping's keys
    value: Kind = None  # a mapping's values


#: What the reader knows of an expression; None: nothing.
Kind = Ros | Own | Super | Many | Foreign | None
_TYPED = (Ros, Own, Many)


@dataclasses.dataclass(frozen=True)
class Use:
    """One use of a name: where, in which function (``Class.method``), at which line."""

    name: str
    path: str
    function: str
    line: int

    @property
    def site(self) -> str:
        return f"{self.path}::{self.function}"

    def __str__(self) -> str:
        return f"{self.name} ({self.path}:{self.line}, {self.function})"


@dataclasses.dataclass
class _Class:
    """A class of the product's, as the reader learns it."""

    name: str
    base: str = ""  # the ROS class it derives from, if any
    own_bases: tuple[str, ...] = ()
    members: set[str] = dataclasses.field(default_factory=set)
    types: dict[str, Kind] = dataclasses.field(default_factory=dict)
    returns: dict[str, ast.expr | None] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Knowledge:
    """What every module's reader shares: the product's classes, what ROS callables return,
    whether a ROS class has a name, the untyped check's vocabulary, and the **kwargs hand-ons."""

    classes: dict[str, _Class]
    results: Mapping[str, str]
    overrides: Callable[[str, str], bool]
    vocabulary: Mapping[str, set[str]]
    own_packages: set[str]
    forwarders: dict[str, tuple[str, frozenset[str]]] = dataclasses.field(default_factory=dict)


def _is_ros(module: str) -> bool:
    return module.split(".")[0] in ROOTS


def imports_ros(source: str) -> bool:
    """Whether the module imports anything of ROOTS."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(_is_ros(alias.name) for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module and not node.level and _is_ros(node.module):
            return True
    return False


def untyped_vocabulary(packages: Iterable[str] = ("rclpy", "rcl_interfaces")) -> dict[str, set[str]]:
    """attribute -> the classes defining it, read from the installed packages' sources: methods,
    class attributes and what methods assign to ``self`` (so instance attributes count)."""
    vocabulary: dict[str, set[str]] = {}
    for package in packages:
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for path in Path(root).rglob("*.py"):
                module = ".".join((package, *path.relative_to(root).with_suffix("").parts))
                for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                    if isinstance(node, ast.ClassDef):
                        for member in _class_members(node):
                            if not (member.startswith("__") and member.endswith("__")):
                                vocabulary.setdefault(member, set()).add(f"{module}.{node.name}")
    return vocabulary


def has_attribute(base: str, name: str) -> bool:
    """Whether the installed ROS class ``base`` (``rclpy.lifecycle.LifecycleNode``) has ``name``."""
    module, _, attribute = base.rpartition(".")
    try:
        return hasattr(getattr(importlib.import_module(module), attribute), name)
    except (ImportError, AttributeError):
        return False


def _is_self_attribute(target: object) -> bool:
    return (
        isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    )


def _class_members(cls: ast.ClassDef) -> set[str]:
    members: set[str] = set()
    for statement in cls.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            members.add(statement.name)
        elif isinstance(statement, ast.Assign):
            members.update(t.id for t in statement.targets if isinstance(t, ast.Name))
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            members.add(statement.target.id)
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        members.update(target.attr for target in targets if _is_self_attribute(target))
    return members


def _is_class_name(name: str) -> bool:
    """CapWords, the product's convention for its classes (not CONSTANTS)."""
    return name[:1].isupper() and not name.isupper()


def _result(name: str) -> Kind:
    """The kind ``results`` names: ``rclpy.time.Time``, or ``rclpy.task.Future[]`` for a list."""
    return Many(Ros(name.removesuffix("[]"))) if name.endswith("[]") else Ros(name)


def _is_copy(function: ast.expr) -> bool:
    """``copy.copy`` or ``copy.deepcopy``: the copy is what was copied."""
    return (
        isinstance(function, ast.Attribute)
        and isinstance(function.value, ast.Name)
        and function.value.id == "copy"
        and function.attr in ("copy", "deepcopy")
    )


def _arguments(arguments: ast.arguments) -> list[ast.arg]:
    return [
        *arguments.posonlyargs,
        *arguments.args,
        *([arguments.vararg] if arguments.vararg else []),
        *arguments.kwonlyargs,
        *([arguments.kwarg] if arguments.kwarg else []),
    ]


class _Reader:
    """Reads one module's uses (see the module docstring)."""

    def __init__(self, path: str, tree: ast.Module, known: _Knowledge, module_scope: dict[str, Kind]) -> None:
        self.path = path
        self.tree = tree
        self.known = known
        self.uses: list[Use] = []
        self.recording = True
        self.globals: dict[str, Kind] = {}
        #: The module's own assignments, kept from one pass to the next so functions see them.
        self.module_scope = module_scope
        self._function = "<module>"
        self._class: _Class | None = None
        self._kwargs: tuple[str, frozenset[str]] | None = None  # the function's **name, its parameters
        self._read_imports()

    def read(self) -> list[Use]:
        self.statements(self.tree.body, self.module_scope)
        return self.uses

    # ---------------------------------------------------------------- names

    def _record(self, name: str, node: ast.AST) -> None:
        if self.recording:
            self.uses.append(Use(name, self.path, self._function, getattr(node, "lineno", 0)))

    def _read_imports(self) -> None:
        """Imports anywhere in the module (the launch file's are in its functions) bind names."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    bound = alias.asname or top
                    if _is_ros(alias.name):
                        self._record(alias.name, node)
                        self.globals[bound] = Ros(alias.name if alias.asname else top)
                    else:
                        self.globals[bound] = FOREIGN
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    self.globals[alias.asname or alias.name] = self._imported(node, alias)
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef) and node.name in self.known.classes:
                self.globals[node.name] = Own(node.name)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.globals[node.name] = FOREIGN

    def _imported(self, node: ast.ImportFrom, alias: ast.alias) -> Kind:
        module = node.module or ""
        if not node.level and _is_ros(module):
            self._record(f"{module}.{alias.name}", node)
            return Ros(f"{module}.{alias.name}")
        if alias.name in self.known.classes:
            return Own(alias.name)
        product = node.level or module.split(".")[0] in self.known.own_packages
        if product and not _is_class_name(alias.name):
            return None  # the product's constants and functions may hold ROS objects
        return FOREIGN

    def annotation(self, node: ast.expr | None) -> Kind:
        """What an annotation names: ``LifecyclePublisher | None`` -> the publisher."""
        if node is None:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self.annotation(ast.parse(node.value, mode="eval").body)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            kinds = {self.annotation(node.left), self.annotation(node.right)} - {FOREIGN}
            return kinds.pop() if len(kinds) == 1 else FOREIGN
        if isinstance(node, ast.Constant) and node.value is None:
            return FOREIGN
        if isinstance(node, ast.Name) and node.id == "Any":
            return None  # could be anything, ROS's too: its attributes go to the untyped check
        if isinstance(node, ast.Subscript):
            return self._container(node)
        kind = self.kind_quietly(node, {})
        return kind if isinstance(kind, Ros | Own) else FOREIGN

    def _container(self, node: ast.Subscript) -> Kind:
        value = node.value
        container = value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", "")
        arguments = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if container in _SEQUENCES:
            return Many(self.annotation(arguments[0]))
        if container in _MAPPINGS and len(arguments) == 2:
            return Many(self.annotation(arguments[0]), self.annotation(arguments[1]))
        return FOREIGN

    # ---------------------------------------------------------------- expressions

    def kind(self, node: ast.expr, scope: dict[str, Kind]) -> Kind:
        """What ``node`` is; records every use in it on the way."""
        if isinstance(node, ast.Name):
            return self._name(node.id, scope)
        if isinstance(node, ast.Attribute):
            return self._attribute(self.kind(node.value, scope), node.attr, node)
        if isinstance(node, ast.Call):
            return self._call(node, scope)
        if isinstance(node, ast.Subscript):
            kind = self.kind(node.value, scope)
            self.kind(node.slice, scope)
            if isinstance(kind, Ros):
                self._record(f"{kind.name}[]", node)
            return None
        if isinstance(node, ast.IfExp):
            self.kind(node.test, scope)
            body, orelse = self.kind(node.body, scope), self.kind(node.orelse, scope)
            return body if body == orelse else None
        if isinstance(node, ast.Lambda):
            self.kind(node.body, {**scope, **{argument.arg: None for argument in _arguments(node.args)}})
            return FOREIGN
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            self._comprehension(node, dict(scope))
            return FOREIGN
        self._children(node, scope)
        constant = ast.Constant | ast.JoinedStr | ast.List | ast.Tuple | ast.Dict | ast.Set
        return FOREIGN if isinstance(node, constant) else None

    def _name(self, name: str, scope: dict[str, Kind]) -> Kind:
        for names in (scope, self.module_scope, self.globals):
            if name in names:
                return names[name]
        return FOREIGN if hasattr(builtins, name) else None

    def _comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, scope: dict[str, Kind]
    ) -> None:
        for generator in node.generators:
            iterated = self.kind(generator.iter, scope)
            self._bind(generator.target, iterated.item if isinstance(iterated, Many) else None, scope)
            for condition in generator.ifs:
                self.kind(condition, scope)
        parts = (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)
        for part in parts:
            self.kind(part, scope)

    def _children(self, node: ast.AST, scope: dict[str, Kind]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.kind(child, scope)
            else:
                self._children(child, scope)

    def _attribute(self, owner: Kind, attr: str, node: ast.AST) -> Kind:
        if isinstance(owner, Ros):
            return self._ros_attribute(owner.name, attr, node)
        if isinstance(owner, Super | Own):
            cls = self._member_class(owner.cls, attr) if isinstance(owner, Own) else None
            if cls is not None:
                kind = cls.types.get(attr)
                return kind if kind is not None else self._named_attribute(attr)
            base = self._base_of(owner.cls)
            return self._ros_attribute(base, attr, node) if base else FOREIGN
        if isinstance(owner, Foreign | Many):
            return FOREIGN
        kind = self._named_attribute(attr)
        if kind is None and attr in self.known.vocabulary:
            self._record(f"{UNTYPED}.{attr}", node)
        return kind

    def _ros_attribute(self, owner: str, attr: str, node: ast.AST) -> Kind:
        name = f"{owner}.{attr}"
        self._record(name, node)
        return _result(self.known.results.get(f"{name}.", name))

    def _named_attribute(self, attr: str) -> Kind:
        """An attribute of an object of unknown type, by its name alone, where the product's own
        classes give that name one type (``label_info_pub``: a LifecyclePublisher)."""
        kinds = {cls.types[attr] for cls in self.known.classes.values() if cls.types.get(attr) is not None}
        typed = {kind for kind in kinds if isinstance(kind, _TYPED)}
        if len(typed) == 1 and len(kinds) == 1:
            return typed.pop()
        return FOREIGN if kinds else None

    def _member_class(self, name: str, attr: str) -> _Class | None:
        """The product class that defines ``attr`` for ``self`` in ``name``: ``name`` itself or
        a base of its, else (``name`` a mixin) the class built from it or one of its other bases:
        a mixin's ``self`` is that class's object."""
        found = self._own_member_class(name, attr)
        if found is not None:
            return found
        return next(
            (c for d in self._derived(name) if (c := self._own_member_class(d, attr)) is not None), None
        )

    def _own_member_class(self, name: str, attr: str) -> _Class | None:
        cls = self.known.classes.get(name)
        if cls is None:
            return None
        if attr in cls.members:
            return cls
        return next((c for b in cls.own_bases if (c := self._own_member_class(b, attr)) is not None), None)

    def _derived(self, name: str) -> list[str]:
        """The product classes with ``name`` among their bases (the node built from mixins)."""
        return [cls.name for cls in self.known.classes.values() if name in cls.own_bases]

    def _base_of(self, name: str) -> str:
        """The ROS class ``self`` in ``name`` is: its own base's, else (a mixin) its node's."""
        return self._own_base_of(name) or next(
            (b for d in self._derived(name) if (b := self._own_base_of(d))), ""
        )

    def _own_base_of(self, name: str) -> str:
        cls = self.known.classes.get(name)
        if cls is None:
            return ""
        return cls.base or next((base for b in cls.own_bases if (base := self._own_base_of(b))), "")

    def _call(self, node: ast.Call, scope: dict[str, Kind]) -> Kind:
        function = node.func
        if isinstance(function, ast.Name) and function.id in ("getattr", "hasattr") and len(node.args) >= 2:
            return self._getattr(node, scope)
        if isinstance(function, ast.Name) and function.id == "super" and self._class is not None:
            return Super(self._class.name)
        callee = self.kind(function, scope)
        arguments = [self.kind(argument, scope) for argument in node.args]
        for keyword in node.keywords:
            self.kind(keyword.value, scope)
            if isinstance(callee, Ros):
                self._ros_keyword(callee.name, keyword, node)
        self._forwarded(function, callee, node)
        if _is_copy(function) and arguments:
            return arguments[0]
        if isinstance(callee, Ros):
            result = self.known.results.get(callee.name)
            return _result(result) if result else None
        if isinstance(callee, Own) and isinstance(function, ast.Name):
            return callee  # the product's class, constructed
        if isinstance(function, ast.Name) and function.id in _PASS_THROUGH:
            return arguments[0] if arguments and isinstance(arguments[0], Many) else FOREIGN
        owner = self.kind_quietly(function.value, scope) if isinstance(function, ast.Attribute) else None
        if isinstance(owner, Many):
            return Many(owner.value) if function.attr == "values" else None
        if isinstance(callee, Foreign):
            return FOREIGN
        if isinstance(owner, Own):
            cls = self._member_class(owner.cls, function.attr)
            if cls is not None and function.attr in cls.returns:
                return self.annotation(cls.returns[function.attr])
        return None

    def _getattr(self, node: ast.Call, scope: dict[str, Kind]) -> Kind:
        """``getattr(x, "name", ...)`` and ``hasattr(x, "name")`` use ``x.name``."""
        literal = node.args[1]
        for argument in node.args[2:]:
            self.kind(argument, scope)
        owner = self.kind(node.args[0], scope)
        if not (isinstance(literal, ast.Constant) and isinstance(literal.value, str)):
            self.kind(literal, scope)
            return None
        kind = self._attribute(owner, literal.value, node)
        return kind if node.func.id == "getattr" else FOREIGN

    def _ros_keyword(self, callee: str, keyword: ast.keyword, node: ast.Call) -> None:
        if keyword.arg:
            self._record(f"{callee}({keyword.arg}=)", node)
        elif self._kwargs and isinstance(keyword.value, ast.Name) and keyword.value.id == self._kwargs[0]:
            self.known.forwarders[self._function] = (callee, self._kwargs[1])

    def _forwarded(self, function: ast.expr, callee: Kind, node: ast.Call) -> None:
        """Keywords a product function hands on to a ROS callable with ``**kwargs`` are that
        callable's (``_describe(..., read_only=True)`` -> ``ParameterDescriptor(read_only=)``)."""
        if isinstance(callee, Own):
            name = f"{callee.cls}.__init__"
        elif isinstance(function, ast.Name):
            name = function.id
        else:
            return
        if name in self.known.forwarders:
            target, parameters = self.known.forwarders[name]
            for keyword in node.keywords:
                if keyword.arg and keyword.arg not in parameters:
                    self._record(f"{target}({keyword.arg}=)", node)

    def kind_quietly(self, node: ast.expr, scope: dict[str, Kind]) -> Kind:
        saved, self.recording = self.recording, False
        try:
            return self.kind(node, scope)
        finally:
            self.recording = saved

    # ---------------------------------------------------------------- statements

    def _bind(self, target: ast.expr, kind: Kind, scope: dict[str, Kind]) -> None:
        if isinstance(target, ast.Name):
            scope[target.id] = kind
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._bind(element, kind.item if isinstance(kind, Many) else None, scope)
        elif isinstance(target, ast.Attribute):
            owner = self.kind(target.value, scope)
            cls = self._class
            if (
                isinstance(owner, Own)
                and cls is not None
                and owner.cls == cls.name
                and target.attr in cls.members
            ):
                if isinstance(kind, _TYPED) or cls.types.get(target.attr) is None:
                    cls.types[target.attr] = kind  # a ROS type from any assignment wins
            else:
                self._attribute(owner, target.attr, target)
        else:
            self.kind(target, scope)

    def _assign(self, targets: list[ast.expr], value: ast.expr, scope: dict[str, Kind]) -> None:
        pairwise = all(
            isinstance(t, ast.Tuple) and isinstance(value, ast.Tuple) and len(t.elts) == len(value.elts)
            for t in targets
        )
        if pairwise:
            kinds = [self.kind(part, scope) for part in value.elts]
            for target in targets:
                for element, kind in zip(target.elts, kinds, strict=True):
                    self._bind(element, kind, scope)
            return
        kind = self.kind(value, scope)
        for target in targets:
            self._bind(target, kind, scope)

    def statements(self, body: list[ast.stmt], scope: dict[str, Kind]) -> None:
        for statement in body:
            self.statement(statement, scope)

    def statement(self, node: ast.stmt, scope: dict[str, Kind]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self._function_def(node, scope)
        elif isinstance(node, ast.ClassDef):
            self._class_def(node, scope)
        elif isinstance(node, ast.Assign):
            self._assign(node.targets, node.value, scope)
        elif isinstance(node, ast.AnnAssign):
            kind = self.annotation(node.annotation)
            value = self.kind(node.value, scope) if node.value is not None else None
            self._bind(node.target, kind if isinstance(kind, _TYPED) else value, scope)
        elif isinstance(node, ast.For | ast.AsyncFor):
            iterated = self.kind(node.iter, scope)
            self._bind(node.target, iterated.item if isinstance(iterated, Many) else None, scope)
            self.statements(node.body, scope)
            self.statements(node.orelse, scope)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                self.kind(item.context_expr, scope)
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, None, scope)
            self.statements(node.body, scope)
        elif not isinstance(node, ast.Import | ast.ImportFrom):
            self._statement_children(node, scope)

    def _statement_children(self, node: ast.stmt, scope: dict[str, Kind]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.kind(child, scope)
            elif isinstance(child, ast.stmt):
                self.statement(child, scope)
            elif isinstance(child, ast.ExceptHandler):
                if child.type is not None:
                    self.kind(child.type, scope)
                if child.name:
                    scope[child.name] = FOREIGN
                self.statements(child.body, scope)
            else:
                self._children(child, scope)

    def _function_def(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: dict[str, Kind], method: bool = False
    ) -> None:
        for decorator in node.decorator_list:
            self.kind(decorator, scope)
        for default in (*node.args.defaults, *node.args.kw_defaults):
            if default is not None:
                self.kind(default, scope)
        cls = self._class if method else None
        saved = (self._function, self._kwargs)
        if cls is not None:
            self._function = f"{cls.name}.{node.name}"
        else:
            self._function = node.name if saved[0] == "<module>" else f"{saved[0]}.{node.name}"
        if cls is not None and cls.base and self.known.overrides(cls.base, node.name):
            self._record(f"{cls.base}.{node.name}", node)
        parameters = frozenset(argument.arg for argument in _arguments(node.args))
        self._kwargs = (node.args.kwarg.arg, parameters) if node.args.kwarg else None
        try:
            self.statements(node.body, self._parameters(node, scope, cls))
        finally:
            self._function, self._kwargs = saved

    def _parameters(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: dict[str, Kind], cls: _Class | None
    ) -> dict[str, Kind]:
        """The function's scope: its parameters as annotated (``self``: the class)."""
        inner = dict(scope)
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        for index, argument in enumerate(_arguments(node.args)):
            if index == 0 and cls is not None and not static:
                inner[argument.arg] = Own(cls.name)
            else:
                inner[argument.arg] = self.annotation(argument.annotation) if argument.annotation else None
        return inner

    def _class_def(self, node: ast.ClassDef, scope: dict[str, Kind]) -> None:
        for base in node.bases:
            self.kind(base, scope)
        saved, self._class = self._class, self.known.classes.get(node.name)
        try:
            for statement in node.body:
                if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                    self._function_def(statement, scope, method=True)
                else:
                    self.statement(statement, {})
        finally:
            self._class = saved


def _classes(modules: Mapping[str, ast.Module]) -> dict[str, _Class]:
    """The product's classes in ``modules``: their members and return annotations."""
    classes: dict[str, _Class] = {}
    for tree in modules.values():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                cls = _Class(node.name, members=_class_members(node))
                for statement in node.body:
                    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                        cls.returns[statement.name] = statement.returns
                classes[node.name] = cls
    return classes


def _type_classes(reader: _Reader) -> None:
    """Each of the module's classes: its bases, and the types its annotations give its attributes."""
    for node in reader.tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        cls = reader.known.classes[node.name]
        for base in node.bases:
            kind = reader.kind_quietly(base, {})
            if isinstance(kind, Ros):
                cls.base = kind.name
            elif isinstance(kind, Own):
                cls.own_bases = (*cls.own_bases, kind.cls)
        for statement in ast.walk(node):
            if isinstance(statement, ast.AnnAssign):
                target = statement.target
                if isinstance(target, ast.Name) or _is_self_attribute(target):
                    name = target.id if isinstance(target, ast.Name) else target.attr
                    cls.types[name] = reader.annotation(statement.annotation)


def read_uses(
    sources: Mapping[str, str],
    results: Mapping[str, str],
    overrides: Callable[[str, str], bool],
    vocabulary: Mapping[str, set[str]],
) -> list[Use]:
    """Every ROS name ``sources`` (path -> text) use, each where it is used.

    ``results``: a ROS callable's name -> the type it returns (``"rclpy.task.Future[]"``: a list
    of them); ``"<name>."`` -> the type of the attribute ``<name>`` (``Node.context``).
    ``overrides(base, name)``: whether the ROS class ``base`` has ``name``, so a method of that
    name in a class built on it overrides it.
    """
    modules = {path: ast.parse(text) for path, text in sources.items()}
    own_packages = {path.split("/")[0] for path in sources} - set(ROOTS)
    known = _Knowledge(_classes(modules), results, overrides, vocabulary, own_packages)
    scopes: dict[str, dict[str, Kind]] = {path: {} for path in modules}
    first = [_Reader(path, tree, known, scopes[path]) for path, tree in modules.items()]
    for reader in first:
        _type_classes(reader)
    for reader in first:  # learns what methods assign to self, module constants, **kwargs hand-ons
        reader.recording = False
        reader.read()
    uses: list[Use] = []
    for path, tree in modules.items():
        uses += _Reader(path, tree, known, scopes[path]).read()
    return uses
