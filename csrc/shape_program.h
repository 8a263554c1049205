/* shape_program.h: symbol slots and relation programs of shape guards (see shape_program.c).
 *
 * A tensor check may bind sizes/strides of the tensor it passed into numbered symbol slots;
 * a symbol check is a small reverse-Polish program over those slots (`s0 >= 2`,
 * `s0 % 8 == 0`), run after every other check of the tree passed. The opcode numbers are a
 * contract with pyjit/guards/shape_program.py (the Python twin and compiler). */
#ifndef PYJIT_SHAPE_PROGRAM_H
#define PYJIT_SHAPE_PROGRAM_H

#include "compat.h"

/* Slot numbers a binding or program may use: [0, PYJIT_MAX_SLOTS). */
#define PYJIT_MAX_SLOTS 1024
/* Operand stack limit of one program (the evaluator's stack lives on the C stack). */
#define PYJIT_PROGRAM_MAX_DEPTH 64
/* Slot storage of one evaluation that lives on the C stack; larger trees use the heap. */
#define PYJIT_SLOTS_ON_STACK 16

typedef enum {
    OP_CONST = 0,     /* operand: the int64 constant */
    OP_SLOT = 1,      /* operand: the slot number */
    OP_ADD = 2,
    OP_SUB = 3,
    OP_MUL = 4,
    OP_FLOORDIV = 5,  /* Python //: floor toward -inf; divisor 0 fails */
    OP_MOD = 6,       /* Python %: sign of the divisor; divisor 0 fails */
    OP_POW = 7,       /* exponent >= 0, else fails */
    OP_NEG = 8,
    OP_MIN = 9,
    OP_MAX = 10,
    OP_EQ = 11,
    OP_NE = 12,
    OP_LT = 13,
    OP_LE = 14,
    OP_GT = 15,
    OP_GE = 16,
    OP_AND = 17,
    OP_OR = 18,
    OP_NOT = 19,
    OP_COUNT_ = 20,
} ShapeOp;

/* The slot values of one evaluation (owned by that evaluation, never by the tree: a Python
 * check may evaluate the same tree again before this evaluation ends). `set[k]` says whether
 * slot k was bound during this evaluation; reading an unset slot fails the program. */
typedef struct {
    int64_t *vals;
    uint8_t *set;
    Py_ssize_t n;
} SlotFrame;

/* One binding of a tensor check: size(dim) (what 0) or stride(dim) (what 1) -> slot. */
typedef struct {
    int what;
    Py_ssize_t dim;
    Py_ssize_t slot;
} SlotBind;

#define BIND_SIZE 0
#define BIND_STRIDE 1

static inline void pyjit_slot_store(const SlotFrame *slots, Py_ssize_t slot, int64_t value)
{
    /* The tree may gain bindings while it is being evaluated (a Python check building into
     * it): a slot beyond this evaluation's storage stays unset, so programs reading it fail. */
    if (slots != NULL && slot < slots->n) {
        slots->vals[slot] = value;
        slots->set[slot] = 1;
    }
}

/* A validated program. */
typedef struct {
    long id;
    PyObject *source;  /* the program as a tuple (strong; for describe()) */
    int64_t *code;     /* PyMem; opcodes with their operands inline */
    Py_ssize_t len;
    Py_ssize_t n_slots; /* 1 + the largest slot it reads (0 if none) */
} SymProgram;

/* Validate `program` (a tuple or list of ints) and fill `out` (code, len, n_slots, source).
 * Returns 0, or -1 with TypeError/ValueError set saying what is wrong. */
int pyjit_program_parse(PyObject *program, SymProgram *out);
void pyjit_program_release(SymProgram *p);
/* 1: the relation holds; 0: it does not, or evaluating it failed (unset slot, division by
 * zero, negative exponent, int64 overflow). Never raises, never runs Python code. */
int pyjit_program_run(const SymProgram *p, const SlotFrame *slots);

#endif /* PYJIT_SHAPE_PROGRAM_H */
