"""The manifest's expression syntax (docs/manifest.md) read back into aotpack/ir/sym.py
expressions: what the build host's checker and verify evaluate, as the C runtime does."""
from __future__ import annotations

from typing import Mapping

from aotpack.ir.sym import Dim, Expr, Sym, floordiv, mod, sym_max, sym_min


def parse(text: str, symbols: Mapping[str, Sym]) -> Dim:
    """The expression `text` in the manifest syntax (docs/manifest.md): integers, symbol names,
    + - * / (floor division) % (floor modulo), min(a, b), max(a, b), parentheses."""
    return _Parser(text, symbols).parse()


class _Parser:
    def __init__(self, text: str, symbols: Mapping[str, Sym]):
        self.text, self.symbols, self.i = text, symbols, 0

    def parse(self) -> Dim:
        v = self._sum()
        self._skip()
        if self.i != len(self.text):
            self._fail("unexpected text")
        return v

    def _fail(self, why: str):
        raise ValueError(f"expression {self.text!r}: {why} at position {self.i}")

    def _skip(self) -> None:
        while self.i < len(self.text) and self.text[self.i] == " ":
            self.i += 1

    def _peek(self) -> str:
        self._skip()
        return self.text[self.i] if self.i < len(self.text) else ""

    def _sum(self) -> Dim:
        v = self._product()
        while self._peek() in ("+", "-"):
            op = self.text[self.i]
            self.i += 1
            w = self._product()
            v = v + w if op == "+" else v - w
        return v

    def _product(self) -> Dim:
        v = self._unary()
        while self._peek() in ("*", "/", "%"):
            op = self.text[self.i]
            self.i += 1
            w = self._unary()
            v = v * w if op == "*" else floordiv(v, w) if op == "/" else mod(v, w)
        return v

    def _unary(self) -> Dim:
        if self._peek() == "-":
            self.i += 1
            return -self._unary()
        return self._atom()

    def _atom(self) -> Dim:
        c = self._peek()
        if c == "(":
            self.i += 1
            v = self._sum()
            if self._peek() != ")":
                self._fail("expected ')'")
            self.i += 1
            return v
        start = self.i
        if c.isdigit():
            while self.i < len(self.text) and self.text[self.i].isdigit():
                self.i += 1
            return int(self.text[start:self.i])
        while self.i < len(self.text) and (self.text[self.i].isalnum() or self.text[self.i] == "_"):
            self.i += 1
        name = self.text[start:self.i]
        if not name:
            self._fail("expected a number, a name or '('")
        if name in ("min", "max") and self._peek() == "(":
            self.i += 1
            a = self._sum()
            if self._peek() != ",":
                self._fail("expected ','")
            self.i += 1
            b = self._sum()
            if self._peek() != ")":
                self._fail("expected ')'")
            self.i += 1
            return sym_min(a, b) if name == "min" else sym_max(a, b)
        if name not in self.symbols:
            self._fail(f"unknown symbol {name!r}")
        s = self.symbols[name]
        return Expr._atom(s)
