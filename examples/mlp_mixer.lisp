;;; mlp_mixer.lisp -- one MLP-Mixer block (Tolstikhin et al. 2021, arXiv:2105.01601).
;;;
;;; For an input X of shape [B, T, C] (batch, tokens/patches, channels):
;;;     U = X + token-mixing(LayerNorm(X))      ; an MLP across tokens, shared by channels
;;;     Y = U + channel-mixing(LayerNorm(U))    ; an MLP across channels, shared by tokens
;;; Each MLP is Linear -> GELU -> Linear. Token mixing works on the transposed
;;; activations [B, C, T], so its weights are W1[T, DT] and W2[DT, T]; channel mixing uses
;;; W3[C, DC] and W4[DC, C]. All weights are inputs; every dim is bound from argument shapes.
;;;
;;;     mod = caten.load("examples/mlp_mixer.lisp", runtime="numpy")
;;;     y = mod.mixer_block(x, g1, be1, w1, b1, w2, b2, g2, be2, w3, b3, w4, b4)

;; The MLP of the paper, applied along the last axis of a rank-3 tensor:
;; (linear x W b) is x @ W + b, and gelu is the exact (erf-based) GELU.
(composite mlp ((X{f32}[B, R, D]) (W1{f32}[D, H]) (b1{f32}[H]) (W2{f32}[H, D]) (b2{f32}[D])
                -> (Y{f32}[B, R, D]))
  "Linear(D->H) -> GELU -> Linear(H->D) along the last axis"
  (setf h (gelu (linear X W1 b1)))              ; [B, R, H]
  (return (linear h W2 b2)))                    ; [B, R, D]

;; Token mixing: the MLP runs along the token axis, so move it last, mix, and move it back.
;; The dims of `mlp` are bound afresh at each call: here R = C, D = T, H = DT.
(composite token-mixing ((X{f32}[B, T, C]) (W1{f32}[T, DT]) (b1{f32}[DT])
                         (W2{f32}[DT, T]) (b2{f32}[T])
                         -> (Y{f32}[B, T, C]))
  "MLP over the token axis"
  (setf xt (permute X [0 2 1]))                 ; [B, C, T]
  (setf m (mlp xt W1 b1 W2 b2))                 ; [B, C, T]
  (return (transpose m)))                       ; swap the last two axes back: [B, T, C]

;; Channel mixing is the plain MLP over the last (channel) axis: R = T, D = C, H = DC.
(composite channel-mixing ((X{f32}[B, T, C]) (W3{f32}[C, DC]) (b3{f32}[DC])
                           (W4{f32}[DC, C]) (b4{f32}[C])
                           -> (Y{f32}[B, T, C]))
  "MLP over the channel axis"
  (mlp X W3 b3 W4 b4))

;; The full block: two pre-norm residual sub-blocks. layernorm normalises over the
;; channel axis with a learned scale (gamma) and shift (beta).
(composite mixer-block ((X{f32}[B, T, C])
                        (gamma1{f32}[C]) (beta1{f32}[C])
                        (W1{f32}[T, DT]) (b1{f32}[DT]) (W2{f32}[DT, T]) (b2{f32}[T])
                        (gamma2{f32}[C]) (beta2{f32}[C])
                        (W3{f32}[C, DC]) (b3{f32}[DC]) (W4{f32}[DC, C]) (b4{f32}[C])
                        -> (Y{f32}[B, T, C]))
  "one MLP-Mixer layer: token mixing then channel mixing, each with a skip connection"
  (setf n1 (layernorm X gamma1 beta1 :axis -1 :eps 1e-5))
  (setf u (+ X (token-mixing n1 W1 b1 W2 b2)))
  (let ((n2 (layernorm u gamma2 beta2 :axis -1 :eps 1e-5)))
    (return (+ u (channel-mixing n2 W3 b3 W4 b4)))))
