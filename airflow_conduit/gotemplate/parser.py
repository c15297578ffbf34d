"""Go ``text/template`` tokens into a tree: text, actions (pipelines of commands), ``if``/``with``/``range``
with ``else``, variables, and named templates: ``define`` (at the top level), ``template`` and ``block``
(pure Python).

Not supported (refused with a message): ``break``/``continue``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .lexer import KEYWORDS, Kind, TemplateSyntaxError, Token, line_at, tokenize
from .values import GoInt


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Literal:
    value: object


@dataclass(frozen=True)
class Dot:
    pass


@dataclass(frozen=True)
class Field:
    """``.A.B`` on the dot (``receiver`` None), or on a variable or a parenthesised pipeline."""

    names: tuple[str, ...]
    receiver: Variable | Pipeline | None = None


@dataclass(frozen=True)
class Variable:
    name: str  # "$" or "$x"


@dataclass(frozen=True)
class Function:
    name: str


Arg = Literal | Dot | Field | Variable | Function


@dataclass(frozen=True)
class Command:
    args: tuple[Arg | Pipeline, ...]


@dataclass(frozen=True)
class Pipeline:
    commands: tuple[Command, ...]
    declare: tuple[str, ...] = ()
    """Variables the pipeline declares (``$x :=``) or assigns (``$x =``, with ``assign``)."""
    assign: bool = False


@dataclass(frozen=True)
class Action:
    pipeline: Pipeline


@dataclass(frozen=True)
class Branch:
    """``if``, ``with`` or ``range``: ``body`` when the pipeline's value is true (or per element), else
    ``otherwise`` (an ``else if`` is a branch inside ``otherwise``)."""

    keyword: str
    pipeline: Pipeline
    body: tuple[Node, ...]
    otherwise: tuple[Node, ...] = ()


@dataclass(frozen=True)
class TemplateCall:
    """``{{template "name" pipeline}}`` (and the call a ``block`` makes): the named template, run with
    the pipeline's value as its dot (nil without one)."""

    name: str
    pipeline: Pipeline | None


Node = Text | Action | Branch | TemplateCall


@dataclass
class _Parser:
    source: str
    tokens: list[Token]
    index: int = 0
    declared: list[set[str]] = field(default_factory=lambda: [{"$"}])
    definitions: dict[str, tuple[Node, ...]] = field(default_factory=dict)
    depth: int = 0

    # ---- tokens ----
    def peek(self, skip_space: bool = True) -> Token | None:
        index = self.index
        while index < len(self.tokens):
            token = self.tokens[index]
            if not (skip_space and token.kind is Kind.SPACE):
                return token
            index += 1
        return None

    def next(self, skip_space: bool = True) -> Token:
        while self.index < len(self.tokens):
            token = self.tokens[self.index]
            self.index += 1
            if not (skip_space and token.kind is Kind.SPACE):
                return token
        raise self.error(len(self.source), "unexpected end of template")

    def error(self, offset: int, message: str) -> TemplateSyntaxError:
        return TemplateSyntaxError(f"template: line {line_at(self.source, offset)}: {message}")

    def expect(self, kind: Kind, what: str) -> Token:
        token = self.next()
        if token.kind is not kind:
            raise self.error(token.offset, f"expected {what}, found {token.text!r}")
        return token

    # ---- lists of nodes ----
    def nodes(self, ends: tuple[str, ...]) -> tuple[tuple[Node, ...], str | None]:
        """Nodes up to one of the keywords ``ends`` (consumed up to the keyword); the keyword found."""
        out: list[Node] = []
        while self.index < len(self.tokens):
            token = self.next(skip_space=False)
            if token.kind is Kind.TEXT:
                out.append(Text(token.text))
                continue
            # token is "{{"
            head = self.peek()
            if head is not None and head.kind is Kind.IDENTIFIER and head.text in KEYWORDS:
                self.next()
                if head.text in ends:
                    return tuple(out), head.text
                node = self.keyword(head)
                if node is not None:
                    out.append(node)
            else:
                out.append(Action(self.pipeline(allow_declare=True)))
                self.expect(Kind.RIGHT, "'}}'")
        if ends:
            raise self.error(len(self.source), f"unexpected end of template: missing {{{{{ends[-1]}}}}}")
        return tuple(out), None

    def keyword(self, token: Token) -> Node | None:
        """The node a keyword starts; ``None`` for a ``define`` (it adds a named template)."""
        if token.text in ("if", "with", "range"):
            return self.branch(token.text)
        if token.text in ("else", "end"):
            raise self.error(token.offset, f"unexpected {{{{{token.text}}}}}")
        if token.text == "define":
            if self.depth:
                raise self.error(token.offset, 'unexpected "define" in command: define only at the top level')
            self.definition(self.template_name("define"), token.offset)
            return None
        if token.text == "template":
            name = self.template_name("template")
            following = self.peek()
            pipeline = None
            if following is not None and following.kind is not Kind.RIGHT:
                pipeline = self.pipeline(allow_declare=False)
            self.expect(Kind.RIGHT, "'}}'")
            return TemplateCall(name, pipeline)
        if token.text == "block":
            # {{block "name" pipeline}}T{{end}} is {{define "name"}}T{{end}}{{template "name" pipeline}}.
            name = self.template_name("block")
            pipeline = self.pipeline(allow_declare=False)
            self.definition(name, token.offset)
            return TemplateCall(name, pipeline)
        raise self.error(token.offset, f"{{{{{token.text}}}}} is not supported")

    def template_name(self, clause: str) -> str:
        token = self.next()
        if token.kind not in (Kind.STRING, Kind.RAW_STRING):
            raise self.error(token.offset, f"unexpected {token.text!r} in {clause} clause")
        name = self.literal(token)
        assert isinstance(name, str)
        return name

    def definition(self, name: str, offset: int) -> None:
        """The body of a ``define`` or ``block`` up to its ``{{end}}``: its own variables (``$`` is its dot)."""
        self.expect(Kind.RIGHT, "'}}'")
        outer, self.declared = self.declared, [{"$"}]
        self.depth += 1
        body, _ = self.nodes(("end",))
        self.expect(Kind.RIGHT, "'}}'")
        self.depth -= 1
        self.declared = outer
        existing = self.definitions.get(name)
        if existing and _non_empty(existing) and _non_empty(body):
            raise self.error(offset, f'template: multiple definition of template "{name}"')
        if not existing or _non_empty(body):
            self.definitions[name] = body

    def branch(self, keyword: str) -> Branch:
        self.depth += 1
        self.declared.append(set())
        pipeline = self.pipeline(allow_declare=True)
        self.expect(Kind.RIGHT, "'}}'")
        body, end = self.nodes(("else", "end"))
        otherwise: tuple[Node, ...] = ()
        if end == "else":
            following = self.peek()
            if (
                following is not None
                and following.kind is Kind.IDENTIFIER
                and following.text in ("if", "with")
            ):
                self.next()
                # `else if`/`else with`: a branch in the else part that ends with this branch's {{end}}.
                otherwise = (self.branch(following.text),)
            else:
                self.expect(Kind.RIGHT, "'}}'")
                otherwise, _ = self.nodes(("end",))
                self.expect(Kind.RIGHT, "'}}'")
        else:
            self.expect(Kind.RIGHT, "'}}'")
        self.declared.pop()
        self.depth -= 1
        return Branch(keyword, pipeline, body, otherwise)

    # ---- pipelines ----
    def pipeline(self, *, allow_declare: bool) -> Pipeline:
        declare: list[str] = []
        assign = False
        start = self.index
        first = self.peek()
        if allow_declare and first is not None and first.kind is Kind.VARIABLE:
            self.next()
            after = self.peek()
            if after is not None and after.kind is Kind.COMMA:
                self.next()
                second = self.expect(Kind.VARIABLE, "a variable")
                after = self.peek()
                names = [first.text, second.text]
            else:
                names = [first.text]
            if after is not None and after.kind in (Kind.DECLARE, Kind.ASSIGN):
                self.next()
                assign = after.kind is Kind.ASSIGN
                declare = names
                if assign:
                    for name in names:
                        self.check_declared(name, first.offset)
                else:
                    self.declared[-1].update(names)
            else:
                self.index = start
        commands = [self.command()]
        while (token := self.peek()) is not None and token.kind is Kind.PIPE:
            self.next()
            commands.append(self.command())
        return Pipeline(tuple(commands), tuple(declare), assign)

    def check_declared(self, name: str, offset: int) -> None:
        if not any(name in scope for scope in self.declared):
            raise self.error(offset, f"undefined variable {name!r}")

    def command(self) -> Command:
        args: list[Arg | Pipeline] = []
        while True:
            token = self.peek()
            if token is None or token.kind in (Kind.RIGHT, Kind.PIPE, Kind.RIGHT_PAREN):
                break
            args.append(self.operand())
            # Arguments are separated by spaces: `.A.B` is one operand, `.A .B` two.
            following = self.peek(skip_space=False)
            if following is not None and following.kind not in (
                Kind.SPACE,
                Kind.RIGHT,
                Kind.PIPE,
                Kind.RIGHT_PAREN,
            ):
                raise self.error(following.offset, f"unexpected {following.text!r} in operand")
        if not args:
            token = self.peek()
            raise self.error(token.offset if token else len(self.source), "missing value for command")
        return Command(tuple(args))

    def operand(self) -> Arg | Pipeline:
        token = self.next()
        term: Arg | Pipeline
        if token.kind is Kind.FIELD:
            return Field((token.text[1:], *self.chain()))
        if token.kind is Kind.DOT:
            term = Dot()
        elif token.kind is Kind.VARIABLE:
            self.check_declared(token.text, token.offset)
            term = Variable(token.text)
        elif token.kind is Kind.LEFT_PAREN:
            term = self.pipeline(allow_declare=False)
            self.expect(Kind.RIGHT_PAREN, "')'")
        elif token.kind is Kind.IDENTIFIER:
            if token.text in KEYWORDS:
                raise self.error(token.offset, f"unexpected keyword {token.text!r} in operand")
            return Function(token.text)
        else:
            return Literal(self.literal(token))
        names = self.chain()
        if names:
            if isinstance(term, Dot):
                return Field(names)
            return Field(names, receiver=term)
        return term

    def chain(self) -> tuple[str, ...]:
        names = []
        while (token := self.peek(skip_space=False)) is not None and token.kind is Kind.FIELD:
            self.next(skip_space=False)
            names.append(token.text[1:])
        return tuple(names)

    def literal(self, token: Token) -> object:
        if token.kind is Kind.BOOL:
            return token.text == "true"
        if token.kind is Kind.NIL:
            return None
        if token.kind is Kind.RAW_STRING:
            return token.text[1:-1]
        if token.kind is Kind.STRING:
            try:
                return ast.literal_eval(token.text)
            except (ValueError, SyntaxError):
                raise self.error(token.offset, f"bad string {token.text}") from None
        if token.kind is Kind.CHAR:
            try:
                value = ast.literal_eval(token.text)
            except (ValueError, SyntaxError):
                value = None
            if not isinstance(value, str) or len(value) != 1:
                raise self.error(token.offset, f"bad character constant {token.text}")
            return ord(value)
        if token.kind is Kind.NUMBER:
            return self.number(token)
        raise self.error(token.offset, f"unexpected {token.text!r}")

    def number(self, token: Token) -> int | float:
        value = self._number(token)
        return GoInt(value) if isinstance(value, int) else value

    def _number(self, token: Token) -> int | float:
        text = token.text.replace("_", "")
        if text.endswith("i"):
            raise self.error(token.offset, f"complex numbers are not supported: {token.text}")
        try:
            if text.lower().lstrip("+-").startswith(("0x", "0b", "0o")):
                return int(text, 0)
            if any(c in text for c in ".eE"):
                return float(text)
            if len(text.lstrip("+-")) > 1 and text.lstrip("+-").startswith("0"):
                return int(text, 8)  # Go's legacy octal: 010 is 8
            return int(text, 10)
        except ValueError:
            raise self.error(token.offset, f"bad number syntax: {token.text!r}") from None


def _non_empty(nodes: tuple[Node, ...]) -> bool:
    """Go's ``IsEmptyTree``: anything but white space text."""
    return any(not (isinstance(node, Text) and not node.text.strip()) for node in nodes)


def parse(source: str) -> tuple[Node, ...]:
    """The template's tree; :class:`TemplateSyntaxError` says where and why it cannot be parsed."""
    return parse_tree(source)[0]


def parse_tree(source: str) -> tuple[tuple[Node, ...], dict[str, tuple[Node, ...]]]:
    """The template's tree and its named templates (``define``, ``block``)."""
    parser = _Parser(source, tokenize(source))
    nodes, _ = parser.nodes(())
    return nodes, parser.definitions
