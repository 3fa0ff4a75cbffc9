;;; train_mixer.lisp -- one training step of an MLP-Mixer classifier, as one caten program.
;;;
;;; The model (examples/mlp_mixer.lisp's block): tokens X[B, T, P] -> linear embedding to C
;;; channels -> one mixer block -> layernorm -> mean over tokens -> linear head to K classes.
;;; Every parameter lives in one flat vector Theta[NP] (sliced and reshaped below), so the step's
;;; state is three arrays -- Theta and Adam's moments M and V -- that the caller alternates between
;;; two sets of buffers (caten's `out=`): no parameter is copied or allocated per step.
;;;
;;;     mod = caten.load("examples/train_mixer.lisp", defines={...sizes...})
;;;     loss, theta, m, v = mod.train_step(x, onehot, theta, m, v, step)
;;;
;;; train-step is forward, backward (value-and-grad) and the Adam update, scheduled, fused and
;;; cached together; `caten -r cuda -S` emits it like any other program.

(import "mlp_mixer.lisp")

;; The architecture: C channels, token-MLP width DT, channel-MLP width DC. train_mixer.py lays
;; Theta out in the same order (its LAYOUT). The entries below state Theta's size for C = 32,
;; DT = 64, DC = 64 as a `where` clause, so a Theta of another size is refused before any kernel
;; runs; the assert checks that clause against the layout at compile time.
(composite mixer-classifier ((X{f32}[B, T, P]) (Theta{f32}[NP]) (K) -> (Y{f32}[...]) &key (C 32) (DT 64) (DC 64))
  "logits of a one-block MLP-Mixer whose parameters are the pieces of Theta, in this order"
  (setf T (dim X 1))
  (setf P (dim X 2))
  (setf shapes [[P C] [C] [C] [C] [T DT] [DT] [DT T] [T] [C] [C] [C DC] [DC] [DC C] [C] [C] [C] [C K] [K]])
  (setf sizes [])
  (dotimes (i (len shapes))
    (setf n 1)
    (dotimes (j (len (nth shapes i))) (setf n (* n (nth (nth shapes i) j))))
    (setf sizes (append sizes [n])))
  (setf total 0)
  (dotimes (i (len sizes)) (setf total (+ total (nth sizes i))))
  (assert (same-dim? total (dim Theta 0)) "Theta holds" (dim Theta 0) "numbers but the layout needs" total)
  (setf ps [])
  (setf o 0)
  (dotimes (i (len shapes))
    (setf ps (append ps [(reshape (slice Theta [o (+ o (nth sizes i))]) (nth shapes i))]))
    (setf o (+ o (nth sizes i))))
  (setf h (linear X (nth ps 0) (nth ps 1)))                              ; [B, T, C]
  (setf h (mixer-block h (nth ps 2) (nth ps 3) (nth ps 4) (nth ps 5) (nth ps 6) (nth ps 7)
                       (nth ps 8) (nth ps 9) (nth ps 10) (nth ps 11) (nth ps 12) (nth ps 13)))
  (setf h (mean (layernorm h (nth ps 14) (nth ps 15)) :axis 1))         ; [B, C]
  (linear h (nth ps 16) (nth ps 17)))

(composite loss ((X{f32}[B, T, P]) (Y{f32}[B, K]) (Theta{f32}[NP]) -> (L{f32}) where NP = (+ (* 32 P) (* 129 T) (* 33 K) 4480))
  "mean cross-entropy of the classifier on a batch with one-hot targets"
  (cross-entropy (mixer-classifier X Theta (dim Y 1)) Y))

(composite train-step ((X{f32}[B, T, P]) (Y{f32}[B, K]) (Theta{f32}[NP]) (M{f32}[NP]) (V{f32}[NP]) (t{i64})
                       -> (L{f32}, Theta2{f32}[NP], M2{f32}[NP], V2{f32}[NP])
                       where NP = (+ (* 32 P) (* 129 T) (* 33 K) 4480))
  "the loss before the step, then Adam's new parameters and moments (torch.optim.Adam, lr 3e-3)"
  (setf lg (value-and-grad loss X Y Theta :wrt Theta))
  (setf u (adam-update Theta (nth lg 1) M V t :lr 3e-3))
  (return (nth lg 0) (nth u 0) (nth u 1) (nth u 2)))

(composite predict ((X{f32}[B, T, P]) (Theta{f32}[NP]) -> (Y{i64}[B]) where K = 10, NP = (+ (* 32 P) (* 129 T) (* 33 K) 4480))
  "the predicted class of each example"
  (argmax (mixer-classifier X Theta K) :axis -1))
