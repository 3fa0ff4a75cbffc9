;;; char_lstm.lisp -- a character-level LSTM language model: one training step and one sampler,
;;; each ONE caten program (the time loop a `scan`, compiled once whatever the sequence length).
;;;
;;; The model: one-hot characters X[T, B, V] -> one LSTM layer of H units (torch.nn.LSTM's gates
;;; i, f, g, o) -> a linear head to V logits -> softmax cross-entropy against the next characters.
;;; Every parameter lives in one flat vector Theta[NP], in this order:
;;;     Wih[4H, V]  Whh[4H, H]  Bias[4H]  Wout[V, H]  Bout[V]
;;; (Bias is torch's bias_ih + bias_hh), so the training step's state is three arrays -- Theta and
;;; Adam's moments M and V -- that the caller alternates between two sets of buffers (`out=`).
;;;
;;;     mod = caten.load("examples/char_lstm.lisp")
;;;     loss, theta, m, v = mod.train_step(x, y, h0, c0, theta, m, v, step)
;;;     tokens = mod.sample(prime, h0, c0, theta, seed, temperature, np.zeros(n, np.float32))

(composite char-lstm-weights ((Theta{f32}[NP]) (V) (H) -> (Wih{f32}[...]) (Whh{f32}[...]) (Bias{f32}[...])
                              (Wout{f32}[...]) (Bout{f32}[...]))
  "the five parameter tensors that Theta holds, in char_lstm.py's LAYOUT order"
  (setf G (* 4 H))
  (setf shapes [[G V] [G H] [G] [V H] [V]])
  (setf sizes [(* G V) (* G H) G (* V H) V])
  (setf total (+ (* G (+ V (+ H 1))) (* V (+ H 1))))
  (assert (same-dim? total (dim Theta 0)) "Theta holds" (dim Theta 0) "numbers but the layout needs" total)
  (setf ps [])
  (setf o 0)
  (dotimes (i 5)
    (setf ps (append ps [(reshape (slice Theta [o (+ o (nth sizes i))]) (nth shapes i))]))
    (setf o (+ o (nth sizes i))))
  (return (nth ps 0) (nth ps 1) (nth ps 2) (nth ps 3) (nth ps 4)))

(composite lstm-cell ((XW{f32}[B, G]) (Hp{f32}[B, H]) (Cp{f32}[B, H]) (WhhT{f32}[H, G]) -> (Hn{f32}[B, H]) (Cn{f32}[B, H])
                    where G = (* 4 H))
  "one LSTM step from the input's projection XW (bias included): torch.nn.LSTM's gate order i, f, g, o"
  (setf B (dim Hp 0))
  (setf H (dim Hp 1))
  (setf g (+ XW (matmul Hp WhhT)))
  (setf i (sigmoid (slice g [0 B 1] [0 H 1])))
  (setf f (sigmoid (slice g [0 B 1] [H (* 2 H) 1])))
  (setf gg (tanh (slice g [0 B 1] [(* 2 H) (* 3 H) 1])))
  (setf o (sigmoid (slice g [0 B 1] [(* 3 H) (* 4 H) 1])))
  (setf cn (+ (* f Cp) (* i gg)))
  (return (* o (tanh cn)) cn))

(composite char-lstm-logits ((X{f32}[T, B, V]) (H0{f32}[B, H]) (C0{f32}[B, H]) (Theta{f32}[NP]) -> (Y{f32}[T, B, V]) where NP = (+ (* (* 4 H) (+ V (+ H 1))) (* V (+ H 1))))
  "the logits of the next character at every step: all input projections in one GEMM, then one scan"
  (setf w (char-lstm-weights Theta (dim X 2) (dim H0 1)))
  (setf xw (+ (matmul X (permute (nth w 0) [1 0])) (nth w 2)))     ; [T, B, 4H]
  (setf wt (permute (nth w 1) [1 0]))
  (setf r (scan (lambda (c x)
                  (let ((s (lstm-cell x (nth c 0) (nth c 1) wt)))
                    (next (list (nth s 0) (nth s 1)) (nth s 0))))
                [H0 C0] xw))
  (+ (matmul (nth r 1) (permute (nth w 3) [1 0])) (nth w 4)))

(composite loss ((X{f32}[T, B, V]) (Y{f32}[T, B, V]) (H0{f32}[B, H]) (C0{f32}[B, H]) (Theta{f32}[NP]) -> (L{f32}) where NP = (+ (* (* 4 H) (+ V (+ H 1))) (* V (+ H 1))))
  "mean cross-entropy over all T*B positions (torch's F.cross_entropy on the flattened logits)"
  (cross-entropy (char-lstm-logits X H0 C0 Theta) Y))

(composite train-step ((X{f32}[T, B, V]) (Y{f32}[T, B, V]) (H0{f32}[B, H]) (C0{f32}[B, H])
                       (Theta{f32}[NP]) (M{f32}[NP]) (Vs{f32}[NP]) (t{i64})
                       -> (L{f32}, Theta2{f32}[NP], M2{f32}[NP], V2{f32}[NP]) where NP = (+ (* (* 4 H) (+ V (+ H 1))) (* V (+ H 1))))
  "the loss before the step, then Adam's new parameters and moments (torch.optim.Adam, lr 1e-2):
forward scan, its reverse-mode gradient and the update in one program"
  (setf lg (value-and-grad loss X Y H0 C0 Theta :wrt Theta))
  (setf u (adam-update Theta (nth lg 1) M Vs t :lr 1e-2))
  (return (nth lg 0) (nth u 0) (nth u 1) (nth u 2)))

(composite sample ((Prime{f32}[L, 1, V]) (H0{f32}[1, H]) (C0{f32}[1, H]) (Theta{f32}[NP]) (Seed{i64}[]) (Temp{f32}[])
                   (Steps{f32}[N]) -> (Out{i64}[N]) where NP = (+ (* (* 4 H) (+ V (+ H 1))) (* V (+ H 1))))
  "N characters after the one-hot Prime (L >= 1): a scan over the prime warms the state, then a scan
over Steps (its values unused, its length N the count) carries (h, c, token, trip) and stacks each
token. Temp > 0 draws from softmax(logits / Temp) by the Gumbel-max trick (rand under Seed + trip);
Temp <= 0 is greedy (argmax)."
  (setf V (dim Prime 2))
  (setf w (char-lstm-weights Theta V (dim H0 1)))
  (setf wit (permute (nth w 0) [1 0]))
  (setf wt (permute (nth w 1) [1 0]))
  (setf wot (permute (nth w 3) [1 0]))
  (setf xw (+ (matmul Prime wit) (nth w 2)))
  (setf warm (scan (lambda (c x) (next (lstm-cell x (nth c 0) (nth c 1) wt) 0.0)) [H0 C0] xw))
  (setf st (nth warm 0))
  (setf logits0 (+ (matmul (nth st 0) wot) (nth w 4)))
  (setf r (scan (lambda (c x)
                  (let ((h (nth c 0)) (cc (nth c 1)) (lg (nth c 2)) (k (nth c 3))
                        (tok (if (> Temp 0.0)
                                 (argmax (- (/ lg Temp) (log (- (log (rand [1 V] :seed (+ Seed k)))))))
                                 (argmax lg)))
                        (oh (reshape (cast (= (arange V) tok) f32) [1 V]))
                        (s (lstm-cell (+ (matmul oh wit) (nth w 2)) h cc wt)))
                    (next (list (nth s 0) (nth s 1) (+ (matmul (nth s 0) wot) (nth w 4)) (+ k 1)) tok)))
                [(nth st 0) (nth st 1) logits0 (cast 0 i64)] Steps))
  (nth r 1))
