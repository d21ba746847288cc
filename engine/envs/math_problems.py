"""Deterministic generator for Rollscope's built-in multi-turn math problem set.

Every problem is produced by our own templates and every answer is computed from
the generated numbers (``fractions.Fraction`` wherever division is involved), so
the set needs no external dataset and the ground truth is exact by construction.

Problem ``i`` is drawn from its own RNG seeded with ``f"{seed}:{i}"`` so that its
id, prompt and answer do not depend on how many problems are requested:
``generate_problems(300)[:240] == generate_problems(240)``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

Num = int | Fraction
Gen = Callable[[random.Random, int], tuple[str, str]]

NAMES = ["Ava", "Ben", "Chloe", "Diego", "Emma", "Farah", "Gabe", "Hana", "Ivan", "Jada",
         "Kofi", "Lena", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tariq",
         "Uma", "Victor", "Wen", "Yusuf", "Zoe"]


@dataclass(frozen=True)
class MathProblem:
    """One generated problem; ``answer`` is a string that math_verify parses exactly."""

    id: str
    prompt: str
    answer: str
    difficulty: int
    kind: str


def _fmt(v: Num, decimal: bool = False) -> str:
    """Canonical answer string; decimals only where they are exact (money, percents)."""
    v = Fraction(v)
    if v.denominator == 1:
        return str(v.numerator)
    if decimal and 10**40 % v.denominator == 0:  # only 2s and 5s: the decimal terminates
        return format((Decimal(v.numerator) / Decimal(v.denominator)).normalize(), "f")
    return f"{v.numerator}/{v.denominator}"


def _digits(r: random.Random, n: int) -> int:
    return r.randint(10 ** (n - 1), 10**n - 1)


def _money(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}" if cents % 100 else f"${cents // 100}"


def gen_addition(r: random.Random, d: int) -> tuple[str, str]:
    # Digit count and number of terms both grow with difficulty to make carrying harder.
    size, terms = [(2, 2), (3, 2), (4, 2), (4, 3), (6, 3)][d - 1]
    xs = [_digits(r, size) for _ in range(terms)]
    listed = ", ".join(map(str, xs[:-1])) + f" and {xs[-1]}"
    t = r.choice([f"What is {' + '.join(map(str, xs))}?", f"Compute {' + '.join(map(str, xs))}.",
                  f"Find the sum of {listed}."])
    return t, _fmt(sum(xs))


def gen_subtraction(r: random.Random, d: int) -> tuple[str, str]:
    size = [2, 3, 4, 5, 6][d - 1]
    a, b = _digits(r, size), _digits(r, size - (d % 2))
    if d < 4:  # negative results only once the learner is past the basics
        a, b = max(a, b), min(a, b)
    elif d == 5 and r.random() < 0.5:
        a, b = b, a
    opts = [f"What is {a} - {b}?", f"Subtract {b} from {a}."]
    opts += [f"How much greater is {a} than {b}?"] if a > b else []
    return r.choice(opts), _fmt(a - b)


def gen_multiplication(r: random.Random, d: int) -> tuple[str, str]:
    sa, sb = [(1, 1), (2, 1), (2, 2), (3, 2), (3, 3)][d - 1]
    a, b = _digits(r, sa) + (1 if sa == 1 else 0), _digits(r, sb) + (1 if sb == 1 else 0)
    if d == 5 and r.random() < 0.5:
        a = -a
    t = r.choice([f"What is {a} × {b}?", f"Multiply {a} by {b}.", f"Find the product of {a} and {b}."])
    return t, _fmt(a * b)


def gen_division(r: random.Random, d: int) -> tuple[str, str]:
    lo_b, hi_b, lo_q, hi_q = [(2, 9, 2, 9), (3, 12, 10, 30), (11, 25, 12, 60),
                              (12, 60, 50, 400), (25, 150, 100, 999)][d - 1]
    b, q = r.randint(lo_b, hi_b), r.randint(lo_q, hi_q)
    n = b * q  # built from the quotient so the division is exact
    t = r.choice([f"What is {n} ÷ {b}?", f"Divide {n} by {b}.", f"What is {n} divided by {b}?"])
    return t, _fmt(q)


def gen_order_of_operations(r: random.Random, d: int) -> tuple[str, str]:
    a, b, c, e = (r.randint(2, 12) for _ in range(4))
    if d == 1:
        expr, v = f"{a} + {b} × {c}", a + b * c
    elif d == 2:
        expr, v = f"({a} + {b}) × {c} - {e}", (a + b) * c - e
    elif d == 3:
        expr, v = f"{a} × {b} - {c * e} ÷ {e}", a * b - c
    elif d == 4:
        expr, v = f"{a}^2 + {b} × ({c} - {e})", a * a + b * (c - e)
    else:
        k = r.randint(2, 6)
        m = k * r.randint(1, 4)  # a multiple of k keeps the division exact
        expr, v = f"{m} × ({b} - {c})^2 ÷ {k} - {e}", m * (b - c) ** 2 // k - e
    t = r.choice([f"Evaluate {expr}.", f"What is the value of {expr}?", f"Compute {expr}."])
    return t, _fmt(v)


def gen_fractions(r: random.Random, d: int) -> tuple[str, str]:
    def fr() -> Fraction:
        q = r.randint(2, 12)
        return Fraction(r.randint(1, q - 1), q)

    x, y = fr(), fr()
    op = {1: "+", 2: "+", 3: "-", 4: "×", 5: "÷"}[d]
    v = {"+": x + y, "-": x - y, "×": x * y, "÷": x / y}[op]
    # Parentheses keep "a/b ÷ c/d" from reading as a left-to-right chain of divisions.
    expr = f"({x}) ÷ ({y})" if op == "÷" else f"{x} {op} {y}"
    if d == 1:  # a shared, unreduced denominator keeps level 1 to numerator arithmetic
        q = r.randint(3, 12)
        i, j = r.randint(1, q - 1), r.randint(1, q - 1)
        expr, v = f"{i}/{q} + {j}/{q}", Fraction(i + j, q)
    if d == 5 and r.random() < 0.5:
        z = fr()
        expr, v = f"{expr} + {z}", v + z
    t = r.choice([f"Compute {expr}. Simplify your answer.", f"What is {expr} in lowest terms?",
                  f"Simplify {expr}."])
    return t, _fmt(v)


def gen_percent(r: random.Random, d: int) -> tuple[str, str]:
    if d <= 3:
        p = r.choice([[10, 50, 20], [25, 75, 5, 30], [12, 15, 35, 45, 8]][d - 1])
        n = r.randint(2, 40) * (100 // math.gcd(p, 100))
        return r.choice([f"What is {p}% of {n}?", f"Find {p} percent of {n}."]), _fmt(Fraction(p * n, 100), True)
    name = r.choice(NAMES)
    if d == 4:
        p, price = r.choice([10, 15, 20, 25, 30, 40]), r.randint(4, 60) * 5
        item = r.choice(["jacket", "lamp", "backpack", "pair of boots", "bicycle helmet"])
        t = f"{name} buys a {item} priced at ${price} with a {p}% discount. How many dollars does {name} pay?"
        return t, _fmt(Fraction(price * (100 - p), 100), True)
    up, down = r.choice([10, 20, 25, 50]), r.choice([10, 20, 25, 40])
    base = r.randint(2, 30) * 100
    t = (f"A stock worth ${base} rises by {up}% and then falls by {down}%. "
         "What is its final value in dollars?")
    return t, _fmt(Fraction(base * (100 + up) * (100 - down), 10000), True)


def gen_powers(r: random.Random, d: int) -> tuple[str, str]:
    a, b = r.randint(2, 15), r.randint(2, 9)
    if d == 1:
        return r.choice([f"What is {a} squared?", f"Compute {a}^2."]), _fmt(a * a)
    if d == 2:
        e = r.randint(3, 6) if b <= 3 else 3
        return r.choice([f"What is {b}^{e}?", f"Compute {b} to the power {e}."]), _fmt(b**e)
    if d == 3:
        return f"Compute {a}^2 + {b}^2.", _fmt(a * a + b * b)
    if d == 4:
        s = r.randint(11, 45)
        return f"What is the square root of {s * s}?", _fmt(s)
    c = r.randint(2, 5)
    return f"Evaluate {b}^3 - {a}^2 + 2^{c + 3}.", _fmt(b**3 - a * a + 2 ** (c + 3))


def gen_gcd_lcm(r: random.Random, d: int) -> tuple[str, str]:
    # A shared factor is planted so the gcd is interesting rather than usually 1.
    g = r.randint(2, [6, 6, 20, 12, 15][d - 1])
    a, b = g * r.randint(2, 9), g * r.randint(2, 9)
    while a == b:
        b += g
    if d == 1:
        return f"What is the greatest common divisor of {a} and {b}?", _fmt(math.gcd(a, b))
    if d == 2:
        return f"What is the least common multiple of {a} and {b}?", _fmt(math.lcm(a, b))
    if d == 3:
        return f"Find the GCD of {a * 7} and {b * 7}.", _fmt(math.gcd(a * 7, b * 7))
    if d == 4:
        c = r.randint(3, 16)
        return f"Find the least common multiple of {a}, {b}, and {c}.", _fmt(math.lcm(a, b, c))
    x, y = r.sample(NAMES, 2)
    t = (f"{x} visits the library every {a} days and {y} every {b} days. They were both there today. "
         "In how many days will they next both be at the library on the same day?")
    return t, _fmt(math.lcm(a, b))


def _lin(a: int, var: str, b: int) -> str:
    coef = "" if a == 1 else "-" if a == -1 else str(a)
    if b == 0:
        return f"{coef}{var}"
    return f"{coef}{var} {'+' if b > 0 else '-'} {abs(b)}"


def gen_linear_equation(r: random.Random, d: int) -> tuple[str, str]:
    v = r.choice("xyznt")
    x = r.randint(-12 if d >= 3 else 1, 20)
    if d == 1:
        b = r.randint(2, 50)
        eq, sol = f"{_lin(1, v, b)} = {x + b}", Fraction(x)
    elif d == 2:
        a = r.randint(2, 12)
        eq, sol = f"{a}{v} = {a * x}", Fraction(x)
    elif d == 3:
        a, b = r.randint(2, 12), r.choice([-1, 1]) * r.randint(1, 40)
        eq, sol = f"{_lin(a, v, b)} = {a * x + b}", Fraction(x)
    elif d == 4:
        a, c = r.sample(range(2, 15), 2)
        b = r.randint(-30, 30)
        e = a * x + b - c * x
        eq, sol = f"{_lin(a, v, b)} = {_lin(c, v, e)}", Fraction(x)
    else:  # a(v + b) = k v + e gives v = (e - a b) / (a - k), usually a proper fraction
        a, b, e = r.randint(2, 9), r.randint(1, 20), r.randint(-20, 20)
        k = r.choice([k for k in range(2, 12) if k != a])
        eq, sol = f"{a}({v} + {b}) = {_lin(k, v, e)}", Fraction(e - a * b, a - k)
    t = r.choice([f"Solve for {v}: {eq}.", f"Find {v} if {eq}.", f"What value of {v} satisfies {eq}?"])
    return t, _fmt(sol)


def gen_word_shopping(r: random.Random, d: int) -> tuple[str, str]:
    name = r.choice(NAMES)
    items = r.sample([("notebook", "notebooks"), ("apple", "apples"), ("pen", "pens"),
                      ("muffin", "muffins"), ("candle", "candles"), ("sticker pack", "sticker packs")], 2)
    n1, n2 = r.randint(2, 9), r.randint(2, 9)
    # Whole dollars below level 4; at level 5 prices are multiples of 20 cents so that any
    # 10/20/25% discount still lands on whole cents.
    step = {4: 5, 5: 20}.get(d, 100)
    p1, p2 = (r.randint(max(1, 100 // step), 1200 // step) * step for _ in range(2))
    if d == 1:
        t = r.choice([f"{name} buys {n1} {items[0][1]} at {_money(p1)} each. How many dollars does {name} spend?",
                      f"Each {items[0][0]} costs {_money(p1)}. What is the total cost in dollars of {n1} {items[0][1]}?"])
        return t, _fmt(Fraction(n1 * p1, 100), True)
    total = n1 * p1 + n2 * p2
    basket = f"{n1} {items[0][1]} at {_money(p1)} each and {n2} {items[1][1]} at {_money(p2)} each"
    if d == 2:
        return f"{name} buys {basket}. What is the total cost in dollars?", _fmt(Fraction(total, 100), True)
    paid = (total // 1000 + 1) * 1000 + r.choice([0, 1000, 4000]) * (d - 2)
    if d == 5:
        p = r.choice([10, 20, 25])
        cost = Fraction(total * (100 - p), 100)
        t = (f"{name} buys {basket}. The store takes {p}% off the whole order. {name} pays with "
             f"{_money(paid)}. How much change, in dollars, does {name} get?")
        return t, _fmt(Fraction(paid, 100) - cost / 100, True)
    t = r.choice([f"{name} buys {basket}, paying with {_money(paid)}. How much change, in dollars, does {name} receive?",
                  f"With {_money(paid)} in hand, {name} buys {basket}. How many dollars are left?"])
    return t, _fmt(Fraction(paid - total, 100), True)


def gen_word_rate(r: random.Random, d: int) -> tuple[str, str]:
    name = r.choice(NAMES)
    mode, lo, hi = r.choice([("drives", 40, 90), ("cycles", 10, 25), ("walks", 3, 6), ("rides a train", 60, 150)])
    s, h = r.randint(lo, hi), r.randint(2, 6)
    if d == 1:
        return f"{name} {mode} at {s} km/h for {h} hours. How many kilometers does {name} travel?", _fmt(s * h)
    if d == 2:
        return f"{name} {mode} {s * h} km in {h} hours at a steady pace. What is the speed in km/h?", _fmt(s)
    if d == 3:
        s, m = s - s % 4 + 4, r.choice([15, 30, 45])  # s divisible by 4 makes quarter hours exact
        hours = h + Fraction(m, 60)
        if r.random() < 0.5:
            return (f"{name} {mode} at {s} km/h for {h} hours and {m} minutes. "
                    "How many kilometers is that?"), _fmt(s * hours, True)
        return f"{name} {mode} {s * hours} km at {s} km/h. How many hours does it take?", _fmt(hours, True)
    s2, h2 = r.randint(lo, hi), r.randint(1, 5)
    if d == 4:
        t = (f"{name} {mode} {s * h} km at {s} km/h, then {s2 * h2} km at {s2} km/h. "
             "What is the average speed for the whole trip, in km/h?")
        return t, _fmt(Fraction(s * h + s2 * h2, h + h2))
    gap = r.randint((s + s2) // 2, (s + s2) * 6)
    x, y = r.sample(NAMES, 2)
    t = (f"{x} and {y} start {gap} km apart and travel toward each other at {s} km/h and {s2} km/h. "
         "After how many hours do they meet?")
    return t, _fmt(Fraction(gap, s + s2))


def gen_word_age(r: random.Random, d: int) -> tuple[str, str]:
    x, y = r.sample(NAMES, 2)
    ay = r.randint(3, 15)
    if d == 1:
        n = r.randint(2, 20)
        return r.choice([f"{x} is {ay} years old. How old will {x} be in {n} years?",
                         f"In {n} years, how old will {x} be if {x} is {ay} now?"]), _fmt(ay + n)
    k = r.randint(2, 4)
    if d == 2:
        return f"{y} is {ay} years old. {x} is {k} times as old as {y}. How old is {x}?", _fmt(k * ay)
    if d == 3:
        gap = r.randint(2, 15)
        return (f"The ages of {x} and {y} add up to {2 * ay + gap}. {x} is {gap} years older than {y}. "
                f"How old is {y}?"), _fmt(ay)
    if d == 4:
        # k*y + n = m*(y + n) gives n = (k - m) * y / (m - 1); y is a multiple of m - 1 so n is whole.
        k = r.randint(3, 6)
        m = r.randint(2, k - 1)
        ay = (m - 1) * r.randint(2, 6)
        n = (k - m) * ay // (m - 1)
        return (f"{x} is {k} times as old as {y}. In {n} years, {x} will be {m} times as old as {y}. "
                f"How old is {y} now?"), _fmt(ay)
    p, q = r.sample(range(1, 8), 2)
    u, n = r.randint(2, 8), r.randint(2, 10)
    return (f"The ages of {x} and {y} are in the ratio {p}:{q}. In {n} years the sum of their ages will be "
            f"{(p + q) * u + 2 * n}. How old is {x} now?"), _fmt(p * u)


def gen_word_sharing(r: random.Random, d: int) -> tuple[str, str]:
    name = r.choice(NAMES)
    thing = r.choice(["marbles", "stickers", "cookies", "trading cards", "seashells"])
    k, each = r.randint(2, 8), r.randint(2, 15)
    if d == 1:
        return f"{name} shares {k * each} {thing} equally among {k} friends. How many does each friend get?", _fmt(each)
    if d == 2:
        keep = r.randint(1, 20)
        return (f"{name} has {k * each + keep} {thing}, keeps {keep}, and splits the rest equally among {k} "
                f"friends. How many {thing} does each friend get?"), _fmt(each)
    if d == 3:
        a, b = r.sample(range(1, 8), 2)
        return (f"{name} and a sibling split {(a + b) * each} {thing} in the ratio {a}:{b}. "
                "How many does the one with the larger share get?"), _fmt(max(a, b) * each)
    if d == 4:
        pizzas = r.randint(2, 9)
        people = r.randint(pizzas + 1, 16)
        return (f"{pizzas} pizzas are shared equally among {people} people. What fraction of a pizza "
                "does each person get?"), _fmt(Fraction(pizzas, people))
    b, a, c = sorted(r.sample(range(1, 10), 2)) + [r.randint(1, 9)]
    x, y, z = r.sample(NAMES, 3)
    return (f"${(a + b + c) * each * 10} is divided among {x}, {y}, and {z} in the ratio {a}:{b}:{c}. "
            f"How many more dollars does {x} get than {y}?"), _fmt((a - b) * each * 10)


def gen_word_geometry(r: random.Random, d: int) -> tuple[str, str]:
    w, h = r.randint(2, 30), r.randint(2, 30)
    place = r.choice(["garden", "room", "parking lot", "poster", "field"])
    if d == 1:
        return f"A rectangular {place} is {w} m long and {h} m wide. What is its perimeter in meters?", _fmt(2 * (w + h))
    if d == 2:
        return f"What is the area, in square meters, of a rectangular {place} measuring {w} m by {h} m?", _fmt(w * h)
    if d == 3:
        if r.random() < 0.5:
            return f"A triangle has base {w} cm and height {h} cm. What is its area in square cm?", _fmt(Fraction(w * h, 2), True)
        return f"A square has area {w * w} square meters. What is its perimeter in meters?", _fmt(4 * w)
    if d == 4:
        rw, rh = r.randint(1, w - 1), r.randint(1, h - 1)
        return (f"A {w} m by {h} m {place} has a {rw} m by {rh} m rectangle paved over. "
                "How many square meters are not paved?"), _fmt(w * h - rw * rh)
    cost = r.randint(3, 25)
    return (f"A rectangular {place} has perimeter {2 * (w + h)} m and length {w} m. Covering it costs ${cost} "
            "per square meter. How many dollars does it cost to cover the whole thing?"), _fmt(w * h * cost)


def gen_word_units(r: random.Random, d: int) -> tuple[str, str]:
    a, b = r.randint(2, 40), r.randint(1, 59)
    if d == 1:
        return r.choice([(f"How many centimeters are in {a} meters?", _fmt(100 * a)),
                         (f"How many minutes are in {a} hours?", _fmt(60 * a))])
    if d == 2:
        return r.choice([(f"How many grams are in {a} kilograms and {b * 10} grams?", _fmt(1000 * a + 10 * b)),
                         (f"How many seconds are in {a} minutes and {b} seconds?", _fmt(60 * a + b))])
    if d == 3:
        return r.choice([(f"A rope is {a} m {b} cm long. How many centimeters long is it?", _fmt(100 * a + b)),
                         (f"How many hours are in {a * 30} minutes?", _fmt(Fraction(a, 2), True))])
    if d == 4:
        # Quarter liters divide evenly into 125 mL and 250 mL cups.
        cup, liters = r.choice([125, 250]), Fraction(r.randint(2, 40), 4)
        return (f"A jug holds {_fmt(liters, True)} liters of juice. How many {cup} mL cups does it fill?",
                _fmt(liters * 1000 / cup))
    kmh = r.randint(1, 15) * 18  # multiples of 18 km/h convert to whole m/s
    who = r.choice(["car", "bus", "boat", "cyclist", "horse"])
    return r.choice([(f"A {who} travels at {kmh} km/h. What is its speed in meters per second?", _fmt(Fraction(kmh * 5, 18))),
                     (f"A {who} moves at {kmh * 5 // 18} m/s. What is that speed in km/h?", _fmt(kmh))])


def gen_word_work(r: random.Random, d: int) -> tuple[str, str]:
    x, y = r.sample(NAMES, 2)
    thing = r.choice(["boxes", "toys", "bottles", "chairs", "mugs"])
    rate, h = r.randint(3, 40), r.randint(2, 9)
    if d == 1:
        return f"A machine makes {rate} {thing} per hour. How many {thing} does it make in {h} hours?", _fmt(rate * h)
    if d == 2:
        return f"{x} packs {rate} {thing} per hour. How many hours does {x} need to pack {rate * h} {thing}?", _fmt(h)
    if d == 3:
        r2 = r.randint(3, 40)
        return (f"{x} paints {rate} {thing} per hour and {y} paints {r2} per hour. Working together, "
                f"how many hours do they need for {(rate + r2) * h} {thing}?"), _fmt(h)
    a, b = r.sample(range(2, 13), 2)
    if d == 4:
        return (f"{x} can paint a fence alone in {a} hours and {y} can do it alone in {b} hours. "
                "How many hours does it take them working together?"), _fmt(Fraction(a * b, a + b))
    c = r.randint(max(a, b) + 1, 30)  # a slower drain keeps the net rate positive
    return (f"Pipe A fills a tank in {a} hours, pipe B fills it in {b} hours, and a drain empties it in {c} "
            "hours. With all three open, how many hours does it take to fill the empty tank?"), \
        _fmt(1 / (Fraction(1, a) + Fraction(1, b) - Fraction(1, c)))


# (kind, id prefix, generator); the order is part of the id scheme, so append new kinds at the end.
KINDS: list[tuple[str, str, Gen]] = [
    ("addition", "arith-add", gen_addition), ("subtraction", "arith-sub", gen_subtraction),
    ("multiplication", "arith-mul", gen_multiplication), ("division", "arith-div", gen_division),
    ("order_of_operations", "arith-ops", gen_order_of_operations), ("fractions", "frac", gen_fractions),
    ("percent", "pct", gen_percent), ("powers", "pow", gen_powers), ("gcd_lcm", "gcd-lcm", gen_gcd_lcm),
    ("linear_equation", "alg-lin", gen_linear_equation), ("word_shopping", "word-shop", gen_word_shopping),
    ("word_rate", "word-rate", gen_word_rate), ("word_age", "word-age", gen_word_age),
    ("word_sharing", "word-share", gen_word_sharing), ("word_geometry", "word-geom", gen_word_geometry),
    ("word_units", "word-units", gen_word_units), ("word_work", "word-work", gen_word_work),
]


def generate_problems(n: int = 240, seed: int = 20261122) -> list[MathProblem]:
    """Return ``n`` problems; problem ``i`` depends only on ``seed``, ``i`` and problems before it.

    Raises ValueError past roughly 2000 problems, where small templates run out of unique prompts.
    """
    out: list[MathProblem] = []
    seen: set[str] = set()
    for i in range(n):
        # 17 kinds and 5 levels are coprime, so every (kind, level) pair recurs every 85 problems.
        kind, prefix, gen = KINDS[i % len(KINDS)]
        difficulty = i % 5 + 1
        prompt, answer, attempt = "", "", 0
        # Redraw on a duplicate prompt; only earlier problems decide that, so prefixes stay stable.
        while not prompt or prompt in seen:
            rng = random.Random(f"{seed}:{i}" + (f":{attempt}" if attempt else ""))
            prompt, answer = gen(rng, difficulty)
            attempt += 1
            if attempt > 1000:  # a template family ran out of distinct prompts; fail loudly, never hang
                raise ValueError(f"cannot make {n} unique problems: {kind} level {difficulty} exhausted")
        seen.add(prompt)
        out.append(MathProblem(f"{prefix}-{i:04d}", prompt, answer, difficulty, kind))
    return out


BUILTIN_PROBLEMS: list[MathProblem] = generate_problems()
