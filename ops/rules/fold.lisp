;;; Constant folding (-O1 and up): a principal op whose operands are all constants becomes one
;;; constant, computed at compile time with the op table's own numpy reference (so folding can
;;; never disagree with the interpreter). `(fold EXPR)` evaluates EXPR, which must hold only
;;; constants; broadcast constants stay broadcast. `?op{unary}` matches a node of any op of the
;;; class `unary` and binds ?op to it (the classes come from the op table: docs/rules.md).

(defoptimizer fold-unary   (?op{unary} ?a)         => (fold (?op ?a))         :when (const? ?a))
(defoptimizer fold-binary  (?op{binary} ?a ?b)     => (fold (?op ?a ?b))      :when (and (const? ?a) (const? ?b)))
(defoptimizer fold-ternary (?op{ternary} ?c ?a ?b) => (fold (?op ?c ?a ?b))
  :when (and (const? ?c) (const? ?a) (const? ?b)))
;; CAST is matched by name: its node also holds the target dtype
(defoptimizer fold-cast    (CAST ?a ?t)            => (fold (CAST ?a ?t))     :when (const? ?a))
