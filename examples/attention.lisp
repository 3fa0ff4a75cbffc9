;;; attention.lisp -- causal self-attention blocks (Vaswani et al. 2017), with a residual.
;;;
;;; For X of shape [B, T, D]:
;;;     Q = X Wq,  K = X Wk,  V = X Wv
;;;     S = Q K^T / sqrt(E)              (E = the head dimension)
;;;     S[i, j] = -inf where j > i        (a token may only attend to itself and the past)
;;;     P = softmax(S) along the last axis
;;;     Y = X + (P V) Wo
;;;
;;;     mod = caten.load("examples/attention.lisp", runtime="numpy")
;;;     y = mod.causal_attention(x, wq, wk, wv, wo)          ; one head
;;;     y = mod.causal_mha(x, wq, wk, wv, wo)                ; H heads, per-head weights

;; The core shared by both blocks, on per-head tensors [B, H, T, E].
(composite causal-attend ((Q{f32}[B, H, T, E]) (K{f32}[B, H, T, E]) (V{f32}[B, H, T, E])
                          -> (O{f32}[B, H, T, E]))
  "softmax(mask(Q K^T / sqrt(E))) V with a causal mask"
  ;; A dimension symbol used as a value is an i64 scalar; cast it before taking sqrt.
  (setf scale (sqrt (cast E f32)))
  (setf s (/ (matmul Q (transpose K)) scale))   ; [B, H, T, T]
  ;; Build the mask from indices: i down the rows, j across the columns.
  (setf i (reshape (arange T) [T 1]))           ; [T, 1] i64
  (setf j (reshape (arange T) [1 T]))           ; [1, T] i64
  (setf future (> j i))                         ; [T, T] bool, broadcasts over B and H
  (setf s (where future -inf s))                ; setf again shadows the earlier s
  ;; The diagonal is never masked, so every row keeps a finite entry.
  (setf p (softmax s :axis -1))
  (return (matmul p V)))

;; Single-head attention: view [B, T, D] as one head [B, 1, T, D] and back.
(composite causal-attention ((X{f32}[B, T, D])
                             (Wq{f32}[D, D]) (Wk{f32}[D, D]) (Wv{f32}[D, D]) (Wo{f32}[D, D])
                             -> (Y{f32}[B, T, D]))
  "single-head causal self-attention with a residual connection"
  (setf q (reshape (matmul X Wq) [B 1 T D]))
  (setf k (reshape (matmul X Wk) [B 1 T D]))
  (setf v (reshape (matmul X Wv) [B 1 T D]))
  (setf o (reshape (causal-attend q k v) [B T D]))
  (return (+ X (matmul o Wo))))

;; Multi-head attention with per-head projection weights: Wq[h] maps D -> E for head h,
;; and Wo[h] maps that head's E outputs back to D. Summing the heads' projections is the
;; same as concatenating the heads and multiplying by the stacked [H*E, D] matrix.
(composite causal-mha ((X{f32}[B, T, D])
                       (Wq{f32}[H, D, E]) (Wk{f32}[H, D, E]) (Wv{f32}[H, D, E])
                       (Wo{f32}[H, E, D])
                       -> (Y{f32}[B, T, D]))
  "multi-head causal self-attention with a residual connection"
  (setf x4 (reshape X [B 1 T D]))               ; matmul broadcasts [B,1,T,D] @ [H,D,E]
  (setf q (matmul x4 Wq))                       ; [B, H, T, E]
  (setf k (matmul x4 Wk))
  (setf v (matmul x4 Wv))
  (setf o (causal-attend q k v))                ; [B, H, T, E]
  (setf proj (matmul o Wo))                     ; [B, H, T, D]
  (return (+ X (sum proj :axis 1))))            ; sum over heads: [B, T, D]
