;;; Optimizer steps: each is one torch.optim update of one parameter tensor, written out so that a
;;; training step (forward, backward, update) compiles into one program. Hyperparameters are numbers
;;; (`lr` may also be a scalar tensor of the parameter's dtype); `t`, Adam's 1-based step, is an
;;; integer, a dotimes expression, or an integer scalar tensor known only at run time.

(composite with-weight-decay ((G{T}[...] W{T}[...] wd) -> (Y{T}[...]))
  "g + wd * w, torch.optim's L2 weight decay added to the gradient (g itself when wd is 0)"
  (if (= wd 0) G (+ G (* wd W))))

(composite sgd-update ((W{T}[...] G{T}[...]) -> (W2{T}[...]) &key (lr 1e-3) (weight-decay 0))
  "torch.optim.SGD without momentum: w - lr * (g + weight_decay * w)"
  (- W (* lr (with-weight-decay G W weight-decay))))

(composite momentum-update ((W{T}[...] G{T}[...] V{T}[...]) -> (W2{T}[...] V2{T}[...])
                            &key (lr 1e-3) (momentum 0.9) (weight-decay 0) (nesterov false))
  "torch.optim.SGD with momentum (dampening 0): g += wd w; v' = m v + g; w' = w - lr (nesterov ? g + m v' : v'); v = 0 before the first step gives torch's first buffer v' = g; returns (w' v')"
  (let ((g (with-weight-decay G W weight-decay))
        (v (+ (* V momentum) g))
        (d (if nesterov (+ g (* momentum v)) v)))
    (return (- W (* lr d)) v)))

(composite bias-correction ((t beta) -> (Y{f64}))
  "1 - beta**t in f64 (Adam's bias correction), for an integer step t or an integer scalar tensor"
  (assert (and (int? t) (= (rank t) 0)) "Adam's step t is an integer or an integer scalar tensor, got" (dtype t)
          "of rank" (rank t))
  (- 1 (EXP2 (MUL (cast t f64) (LOG2 (cast beta f64))))))

(composite adam-update ((W{T}[...] G{T}[...] M{T}[...] V{T}[...] t) -> (W2{T}[...] M2{T}[...] V2{T}[...])
                        &key (lr 1e-3) (beta1 0.9) (beta2 0.999) (eps 1e-8) (weight-decay 0))
  "torch.optim.Adam at the 1-based step t: g += wd w; m' = m + (1-b1)(g-m); v' = b2 v + (1-b2) g g; w' = w - lr/(1-b1**t) * m' / (sqrt(v')/sqrt(1-b2**t) + eps); returns (w' m' v')"
  (let ((g (with-weight-decay G W weight-decay))
        (m (+ M (* (- 1 beta1) (- g M))))
        (v (+ (* V beta2) (* (* (- 1 beta2) g) g)))
        ;; as torch: the step size and sqrt(1 - b2**t) in double, then rounded to the parameter's dtype
        (step (cast (/ (cast lr f64) (bias-correction t beta1)) (dtype W)))
        (bc2 (cast (sqrt (bias-correction t beta2)) (dtype W)))
        (denom (+ (/ (sqrt v) bc2) eps)))
    (return (- W (* step (/ m denom))) m v)))

(composite adamw-update ((W{T}[...] G{T}[...] M{T}[...] V{T}[...] t) -> (W2{T}[...] M2{T}[...] V2{T}[...])
                         &key (lr 1e-3) (beta1 0.9) (beta2 0.999) (eps 1e-8) (weight-decay 0.01))
  "torch.optim.AdamW: w *= 1 - lr * weight_decay (decoupled), then Adam's step without weight decay; returns (w' m' v')"
  (let ((r (adam-update (if (= weight-decay 0) W (* W (- 1 (* lr weight-decay))))
                        G M V t :lr lr :beta1 beta1 :beta2 beta2 :eps eps)))
    (return (nth r 0) (nth r 1) (nth r 2))))
