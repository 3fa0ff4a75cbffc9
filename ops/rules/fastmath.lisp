;;; Fast-math identities (`--fast-math` / `fast_math=True` only, never by an -O level). Exact in
;;; real arithmetic but not always in floating point: a * (1/b) rounds twice (110/55 gives
;;; 1.9999999 in f32) and overflows where a/b does not (1e-30/1e-39); 1/(1/x) and log2(2**x) round
;;; differently from x in the last bit and differ where the inner op overflows or underflows.
;;; Like -ffast-math, this trades IEEE results for fewer or cheaper ops.

(defoptimizer div-recip   (FDIV ?a ?b) => (MUL ?a (RECIP ?b)))
(defoptimizer recip-recip (RECIP (RECIP ?x)) => ?x)
(defoptimizer log2-exp2   (LOG2 (EXP2 ?x)) => ?x)
(defoptimizer log-exp     (log (exp ?x)) => ?x)
(defoptimizer sqrt-square (SQRT (MUL ?x ?x)) => (WHERE (CMPLT ?x 0) (NEG ?x) ?x))  ; |x|
