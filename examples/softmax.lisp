;;; softmax.lisp -- a numerically stable row softmax, written out step by step.
;;;
;;; Run it from the command line (the LAST composite in a file is the default entry):
;;;     caten run examples/softmax.lisp X=x.npy -o y.npy
;;; or from Python:
;;;     mod = caten.load("examples/softmax.lisp", runtime="numpy")
;;;     y = mod.softmax_rows(x)          ; dashes in names become underscores
;;;
;;; A quick tour of the language, as used below:
;;;   ;  comments run to the end of the line, and #| ... |# comments may span lines.
;;;   (composite NAME (INPUTS -> OUTPUTS) "doc" BODY...) defines a kernel.
;;;   X{f32}[B, N] is a tensor annotation: the name X, the dtype f32 and the shape [B, N].
;;;   B and N are dimension symbols: they are bound from the shapes of the arguments when
;;;   the composite is called, so one program handles every size.
;;;   (setf NAME EXPR) binds a name; (return EXPR ...) gives the outputs, whose dtype and
;;;   shape are checked against the declared OUTPUTS.
;;;   Calls look like (op ARG ... :KEYWORD VALUE ...); library ops follow numpy semantics,
;;;   including broadcasting.

#| A helper composite: shift each row by its maximum and exponentiate.
   Subtracting the row maximum does not change the softmax (it cancels in the ratio)
   but keeps exp() from overflowing: every exponent is <= 0, so every term is in (0, 1]. |#
(composite shifted-exp ((X{f32}[B, N]) -> (E{f32}[B, N]))
  "exp(x - max(x)) along each row"
  ;; max with a single argument reduces; :keepdims true keeps the reduced axis as a 1,
  ;; so m has shape [B, 1] and broadcasts against X's [B, N].
  (setf m (max X :axis 1 :keepdims true))
  (return (exp (- X m))))

;;; The entry point: calls the helper above, then normalises each row.
(composite softmax-rows ((X{f32}[B, N]) -> (Y{f32}[B, N]))
  "numerically stable softmax over the last axis of a [B, N] matrix"
  (setf e (shifted-exp X))                      ; a user composite is called like any op
  (setf s (sum e :axis 1 :keepdims true))       ; row sums, shape [B, 1]; each is >= 1
  (return (/ e s)))
