;;; Losses besides cross-entropy and mse (ops/nn.lisp), each torch.nn.functional's default reduction
;;; unless docs/language.md section 5.2 says otherwise.

(composite l1-loss ((A{T}[...] B{T}[...]) -> (Y{T})) "mean absolute error over every element" (mean (abs (- A B))))

(composite nll-loss ((logp{T}[...] onehot{T}[...]) -> (Y{T}))
  "mean over the batch of -sum(onehot * logp) along the last axis (a one-hot target; a log-probability of -inf where the target is 0 adds nothing)"
  (mean (NEG (sum (WHERE (= onehot 0) 0 (MUL onehot logp)) :axis -1))))

(composite bce-with-logits ((Z{T}[...] Y{T}[...]) -> (L{T}))
  "mean over every element of max(z, 0) - z*y + log1p(e**-|z|): binary cross-entropy of sigmoid(z), stable for any z; soft targets allowed"
  (mean (+ (- (MAX Z 0) (* Z Y)) (log1p (exp (NEG (abs Z)))))))

(composite kl-div ((logp{T}[...] Q{T}[...]) -> (Y{T}))
  "sum(q * (log q - logp)) / batch (torch's kl_div with reduction=batchmean; 0 * log 0 = 0)"
  (assert (> (rank logp) 0) "kl-div needs a batch axis")
  (/ (sum (WHERE (= Q 0) 0 (* Q (- (log Q) logp)))) (cast (dim logp 0) (dtype logp))))

(composite dropout ((X{T}[...] p) -> (Y{T}[...]) &key (seed 0))
  "zero each element with probability p, scale the rest by 1/(1-p); the mask is rand's (24 bits a draw) under :seed, an integer or an integer scalar tensor (the same seed, the same mask); p = 0 is the identity"
  (assert (float? X) "dropout needs a float tensor")
  (assert (and (>= p 0) (<= p 1)) "dropout: p must lie in [0, 1]")
  (if (= p 0) X
      (if (= p 1) (* X 0)
          (WHERE (< (rand (shape X) :seed seed) p) 0 (* X (/ 1 (- 1 p)))))))
