;;; Constant folding (-O1 and up): a principal op whose operands are all constants becomes one
;;; constant, computed at compile time with the op table's own numpy reference (so folding can
;;; never disagree with the interpreter). `(fold EXPR)` evaluates EXPR, which must hold only
;;; constants; broadcast constants stay broadcast.

(defoptimizer fold-neg   (NEG ?a)   => (fold (NEG ?a))   :when (const? ?a))
(defoptimizer fold-recip (RECIP ?a) => (fold (RECIP ?a)) :when (const? ?a))
(defoptimizer fold-sqrt  (SQRT ?a)  => (fold (SQRT ?a))  :when (const? ?a))
(defoptimizer fold-exp2  (EXP2 ?a)  => (fold (EXP2 ?a))  :when (const? ?a))
(defoptimizer fold-log2  (LOG2 ?a)  => (fold (LOG2 ?a))  :when (const? ?a))
(defoptimizer fold-sin   (SIN ?a)   => (fold (SIN ?a))   :when (const? ?a))
(defoptimizer fold-not   (NOT ?a)   => (fold (NOT ?a))   :when (const? ?a))
(defoptimizer fold-cast  (CAST ?a ?t) => (fold (CAST ?a ?t)) :when (const? ?a))

(defoptimizer fold-add   (ADD ?a ?b)   => (fold (ADD ?a ?b))   :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-mul   (MUL ?a ?b)   => (fold (MUL ?a ?b))   :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-fdiv  (FDIV ?a ?b)  => (fold (FDIV ?a ?b))  :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-idiv  (IDIV ?a ?b)  => (fold (IDIV ?a ?b))  :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-mod   (MOD ?a ?b)   => (fold (MOD ?a ?b))   :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-max   (MAX ?a ?b)   => (fold (MAX ?a ?b))   :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-and   (AND ?a ?b)   => (fold (AND ?a ?b))   :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-or    (OR ?a ?b)    => (fold (OR ?a ?b))    :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-xor   (XOR ?a ?b)   => (fold (XOR ?a ?b))   :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-cmplt (CMPLT ?a ?b) => (fold (CMPLT ?a ?b)) :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-cmpne (CMPNE ?a ?b) => (fold (CMPNE ?a ?b)) :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-where (WHERE ?c ?a ?b) => (fold (WHERE ?c ?a ?b))
  :when (and (const? ?c) (const? ?a) (const? ?b)))
