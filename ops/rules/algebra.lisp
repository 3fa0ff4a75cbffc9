;;; Algebraic identities (-O2 and up). Every rule here is exact for every dtype it applies to,
;;; nan, inf and the sign of zero included (`caten rules check` tests them).

;; identities of + and *
;; (a float x + 0.0 is not x: -0.0 + 0.0 is +0.0; x + -0.0 is, and so is x - 0.0)
(defoptimizer add-zero   (ADD ?x ?c) => ?x :when (add-identity? ?c))
(defoptimizer zero-add   (ADD ?c ?x) => ?x :when (add-identity? ?c))
(defoptimizer mul-one    (MUL ?x 1) => ?x)
(defoptimizer one-mul    (MUL 1 ?x) => ?x)
(defoptimizer mul-neg-one (MUL ?x -1) => (NEG ?x) :when (not (bool? ?x)))

;; division by +-2**k is multiplication by +-2**-k when that is exact in the dtype: both round
;; the same real number once (fold then computes the reciprocal constant)
(defoptimizer div-pow2   (FDIV ?x ?c) => (MUL ?x (RECIP ?c)) :when (exact-recip? ?c))

;; involutions
(defoptimizer neg-neg    (NEG (NEG ?x)) => ?x)
(defoptimizer not-not    (NOT (NOT ?x)) => ?x)

;; idempotent binary ops
(defoptimizer max-self   (MAX ?x ?x) => ?x)
(defoptimizer and-self   (AND ?x ?x) => ?x)
(defoptimizer or-self    (OR ?x ?x) => ?x)
(defoptimizer xor-self   (XOR ?x ?x) => 0)
(defoptimizer and-true   (AND ?x true) => ?x)
(defoptimizer or-false   (OR ?x false) => ?x)

;; selection with a known or negated condition, or equal branches
(defoptimizer where-true  (WHERE true ?a ?b) => ?a)
(defoptimizer where-false (WHERE false ?a ?b) => ?b)
(defoptimizer where-same  (WHERE ?c ?a ?a) => ?a)
(defoptimizer where-not   (WHERE (NOT ?c) ?a ?b) => (WHERE ?c ?b ?a))

;; a cast through a dtype that holds every value of the source exactly is one cast
(defoptimizer cast-cast  (CAST (CAST ?x ?t) ?u) => (CAST ?x ?u) :when (lossless? (dtype ?x) ?t))

;; copying a fresh copy again
(defoptimizer copy-copy  (COPY (COPY ?x)) => (COPY ?x))

;; library level: these match calls before they are expanded
(defoptimizer neg-neg-call (neg (neg ?x)) => ?x)
(defoptimizer transpose-transpose (transpose (transpose ?x)) => ?x)
