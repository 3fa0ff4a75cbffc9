;;; Fast-math identities (-O3 only). Exact in real arithmetic but not always in floating point:
;;; 1/(1/x) and log2(2**x) round differently from x in the last bit, and they differ where the
;;; inner op overflows or underflows (|x| beyond ~88 for exp in f32, subnormal x for recip).
;;; Like -ffast-math, -O3 trades that for fewer ops; -O2 never changes a result's bits.

(defoptimizer recip-recip (RECIP (RECIP ?x)) => ?x)
(defoptimizer log2-exp2   (LOG2 (EXP2 ?x)) => ?x)
(defoptimizer log-exp     (log (exp ?x)) => ?x)
(defoptimizer sqrt-square (SQRT (MUL ?x ?x)) => (WHERE (CMPLT ?x 0) (NEG ?x) ?x))  ; |x|
