/* shape_program.c: validation and evaluation of shape-relation programs (symbol checks).
 *
 * Owns: parsing a Python tuple of ints into a validated program (known opcodes, operands
 * present, constants in int64, slot numbers in range, no stack underflow, bounded depth, one
 * value left) and the evaluator. Arithmetic is int64 with Python's semantics where C differs:
 * // and % round toward -inf, and every overflow (checked with __builtin_*_overflow, never
 * UB) makes the relation fail, as do a zero divisor and a negative exponent. The pure-Python
 * twin is pyjit/guards/shape_program.py:run_program; tests compare both on random programs.
 */
#include "shape_program.h"

static int op_arity(int64_t op)
{
    switch (op) {
    case OP_CONST:
    case OP_SLOT:
        return 0;
    case OP_NEG:
    case OP_NOT:
        return 1;
    default:
        return 2;
    }
}

int pyjit_program_parse(PyObject *program, SymProgram *out)
{
    if (!PyTuple_Check(program) && !PyList_Check(program)) {
        PyErr_Format(PyExc_TypeError, "check_symbols(): program must be a tuple of ints, got %.80s",
                     Py_TYPE(program)->tp_name);
        return -1;
    }
    PyObject *seq = PySequence_Fast(program, "program"); /* new ref; same object for tuple/list */
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    if (len == 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "check_symbols(): empty program");
        return -1;
    }
    int64_t *code = PyMem_Calloc((size_t)len, sizeof(int64_t));
    if (code == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyLong_Check(item) || PyBool_Check(item)) {
            PyErr_Format(PyExc_TypeError, "check_symbols(): program[%zd] is %.80s, expected an int",
                         i, Py_TYPE(item)->tp_name);
            goto error;
        }
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            goto error;
        }
        if (overflow) {
            PyErr_Format(PyExc_ValueError, "check_symbols(): program[%zd] does not fit in int64", i);
            goto error;
        }
        code[i] = (int64_t)v;
    }
    /* Walk the opcodes: operands, slot range, stack depth. */
    Py_ssize_t depth = 0, n_slots = 0;
    for (Py_ssize_t pc = 0; pc < len; pc++) {
        int64_t op = code[pc];
        if (op < 0 || op >= OP_COUNT_) {
            PyErr_Format(PyExc_ValueError, "check_symbols(): unknown opcode %lld at program[%zd]",
                         (long long)op, pc);
            goto error;
        }
        if (op == OP_CONST || op == OP_SLOT) {
            if (pc + 1 >= len) {
                PyErr_Format(PyExc_ValueError,
                             "check_symbols(): opcode %lld at program[%zd] needs an operand",
                             (long long)op, pc);
                goto error;
            }
            pc++;
            if (op == OP_SLOT) {
                int64_t slot = code[pc];
                if (slot < 0 || slot >= PYJIT_MAX_SLOTS) {
                    PyErr_Format(PyExc_ValueError,
                                 "check_symbols(): slot %lld at program[%zd] out of range [0, %d)",
                                 (long long)slot, pc, PYJIT_MAX_SLOTS);
                    goto error;
                }
                if (slot + 1 > n_slots) {
                    n_slots = (Py_ssize_t)slot + 1;
                }
            }
            if (++depth > PYJIT_PROGRAM_MAX_DEPTH) {
                PyErr_Format(PyExc_ValueError, "check_symbols(): program needs more than %d stack entries",
                             PYJIT_PROGRAM_MAX_DEPTH);
                goto error;
            }
            continue;
        }
        int arity = op_arity(op);
        if (depth < arity) {
            PyErr_Format(PyExc_ValueError,
                         "check_symbols(): opcode %lld at program[%zd] needs %d operand(s), stack has %zd",
                         (long long)op, pc, arity, depth);
            goto error;
        }
        depth -= arity - 1;
    }
    if (depth != 1) {
        PyErr_Format(PyExc_ValueError, "check_symbols(): program leaves %zd values on the stack, expected 1",
                     depth);
        goto error;
    }
    Py_DECREF(seq);
    out->source = PySequence_Tuple(program); /* a copy: a list given here may change later */
    if (out->source == NULL) {
        PyMem_Free(code);
        return -1;
    }
    out->code = code;
    out->len = len;
    out->n_slots = n_slots;
    return 0;
error:
    Py_DECREF(seq);
    PyMem_Free(code);
    return -1;
}

void pyjit_program_release(SymProgram *p)
{
    Py_CLEAR(p->source);
    PyMem_Free(p->code);
    p->code = NULL;
    p->len = 0;
}

/* Python's a // b and a % b in int64; 0 when undefined (zero divisor) or overflowing. */
static inline int floordiv64(int64_t a, int64_t b, int64_t *r)
{
    if (b == 0 || (a == INT64_MIN && b == -1)) {
        return 0; /* -2**63 // -1 == 2**63 does not fit */
    }
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) {
        q -= 1;
    }
    *r = q;
    return 1;
}

static inline int mod64(int64_t a, int64_t b, int64_t *r)
{
    if (b == 0) {
        return 0;
    }
    if (b == -1) {
        *r = 0; /* INT64_MIN % -1 is UB in C; the answer is always 0 */
        return 1;
    }
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) {
        m += b;
    }
    *r = m;
    return 1;
}

/* a ** b by squaring. An intermediate square that overflows while exponent bits remain
 * means the result overflows too (|base| >= 2 there, and the result keeps that factor). */
static inline int pow64(int64_t a, int64_t b, int64_t *r)
{
    if (b < 0) {
        return 0;
    }
    int64_t result = 1, base = a;
    while (b > 0) {
        if (b & 1) {
            if (__builtin_mul_overflow(result, base, &result)) {
                return 0;
            }
        }
        b >>= 1;
        if (b > 0 && __builtin_mul_overflow(base, base, &base)) {
            return 0;
        }
    }
    *r = result;
    return 1;
}

int pyjit_program_run(const SymProgram *p, const SlotFrame *slots)
{
    int64_t stack[PYJIT_PROGRAM_MAX_DEPTH];
    Py_ssize_t sp = 0; /* validated: never underflows, never exceeds the limit */
    const int64_t *code = p->code;
    Py_ssize_t len = p->len;
    for (Py_ssize_t pc = 0; pc < len; pc++) {
        int64_t op = code[pc];
        if (op == OP_CONST) {
            stack[sp++] = code[++pc];
            continue;
        }
        if (op == OP_SLOT) {
            int64_t k = code[++pc];
            if (slots == NULL || k >= slots->n || !slots->set[k]) {
                return 0; /* not bound in this evaluation */
            }
            stack[sp++] = slots->vals[k];
            continue;
        }
        if (op == OP_NEG) {
            if (stack[sp - 1] == INT64_MIN) {
                return 0;
            }
            stack[sp - 1] = -stack[sp - 1];
            continue;
        }
        if (op == OP_NOT) {
            stack[sp - 1] = stack[sp - 1] == 0;
            continue;
        }
        int64_t b = stack[--sp], a = stack[sp - 1], r;
        switch ((ShapeOp)op) {
        case OP_ADD:
            if (__builtin_add_overflow(a, b, &r)) {
                return 0;
            }
            break;
        case OP_SUB:
            if (__builtin_sub_overflow(a, b, &r)) {
                return 0;
            }
            break;
        case OP_MUL:
            if (__builtin_mul_overflow(a, b, &r)) {
                return 0;
            }
            break;
        case OP_FLOORDIV:
            if (!floordiv64(a, b, &r)) {
                return 0;
            }
            break;
        case OP_MOD:
            if (!mod64(a, b, &r)) {
                return 0;
            }
            break;
        case OP_POW:
            if (!pow64(a, b, &r)) {
                return 0;
            }
            break;
        case OP_MIN: r = a < b ? a : b; break;
        case OP_MAX: r = a > b ? a : b; break;
        case OP_EQ: r = a == b; break;
        case OP_NE: r = a != b; break;
        case OP_LT: r = a < b; break;
        case OP_LE: r = a <= b; break;
        case OP_GT: r = a > b; break;
        case OP_GE: r = a >= b; break;
        case OP_AND: r = a != 0 && b != 0; break;
        case OP_OR: r = a != 0 || b != 0; break;
        default:
            return 0; /* unreachable: validated */
        }
        stack[sp - 1] = r;
    }
    return stack[0] != 0;
}
