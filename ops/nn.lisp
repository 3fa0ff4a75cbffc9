;;; Neural-network composites.

(composite matmul ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "matrix product with numpy's rules: batched, broadcast batch axes, 1-D operands (float8: products and sums in f32, the result cast to T)"
  (assert (and (> (rank A) 0) (> (rank B) 0)) "matmul needs operands of rank >= 1")
  (if (and (float? A) (= (bits A) 8))
    (cast (matmul (cast A f32) (cast B f32)) (dtype A))
  (if (and (= (rank A) 1) (= (rank B) 1))
      (progn                                             ; 1-D . 1-D: the inner product, a scalar
        (assert (same-dim? (dim A 0) (dim B 0))          ; sizes 1 and 4 must not broadcast
                "matmul: inner dimensions differ:" (dim A 0) "vs" (dim B 0))
        (sum (MUL A B)))
    (if (= (rank A) 1)
      (VIEW (matmul (VIEW A :unsqueeze 0) B) :squeeze -2)
      (if (= (rank B) 1)
          (VIEW (matmul A (VIEW B :unsqueeze -1)) :squeeze -1)
          (progn
            (assert (same-dim? (dim A -1) (dim B -2))
                    "matmul: inner dimensions differ:" (dim A -1) "vs" (dim B -2))
            ;; [..., M, 1, K] * [..., 1, N, K] summed over K
            (sum (MUL (VIEW A :unsqueeze -2) (VIEW (transpose B) :unsqueeze -3)) :axis -1)))))))

(composite linear ((X{T}[...] W{T}[...] b{T}[...]) -> (Y{T}[...])) "x @ W + b" (ADD (matmul X W) b))

(composite softmax ((X{T}[...]) -> (Y{T}[...]) &key (axis -1))
  "exp(x - max) / sum(exp(x - max)) along :axis"
  :vjp ((dY) (* Y (- dY (sum (* dY Y) :axis axis :keepdims true))))
  (let ((e (exp (- X (max X :axis axis :keepdims true)))))
    (/ e (sum e :axis axis :keepdims true))))
(composite log-softmax ((X{T}[...]) -> (Y{T}[...]) &key (axis -1))
  "x - max - log(sum(exp(x - max))) along :axis"
  :vjp ((dY) (- dY (* (exp Y) (sum dY :axis axis :keepdims true))))
  (let ((z (- X (max X :axis axis :keepdims true))))
    (- z (log (sum (exp z) :axis axis :keepdims true)))))

(composite layernorm ((X{T}[...] gamma{T}[...] beta{T}[...]) -> (Y{T}[...]) &key (axis -1) (eps 1e-5))
  "(x - mean) / sqrt(var + eps) * gamma + beta over trailing :axis (biased variance)"
  ;; the closed form: dX = rstd (g - mean(g) - xhat mean(g xhat)), g = dY gamma; the shares of
  ;; gamma and beta are given at the output's shape and summed down to theirs
  :vjp ((dY)
        (let ((mu (mean X :axis axis :keepdims true))
              (d (- X mu))
              (rstd (rsqrt (+ (mean (* d d) :axis axis :keepdims true) eps)))
              (xhat (* d rstd))
              (g (* dY gamma)))
          (return (* rstd (- g (mean g :axis axis :keepdims true)
                             (* xhat (mean (* g xhat) :axis axis :keepdims true))))
                  (* dY xhat)
                  dY)))
  (let ((mu (mean X :axis axis :keepdims true))
        (d (- X mu))
        (var (mean (* d d) :axis axis :keepdims true)))
    (+ (* (* d (rsqrt (+ var eps))) gamma) beta)))
(composite rmsnorm ((X{T}[...] gamma{T}[...]) -> (Y{T}[...]) &key (axis -1) (eps 1e-6))
  "x / sqrt(mean(x*x) + eps) * gamma"
  (* (* X (rsqrt (+ (mean (* X X) :axis axis :keepdims true) eps))) gamma))

(composite windows ((X{T}[...]) -> (Y{T}[...]) &key (kernel 1) (stride 1) (dilation 1) (groups 1))
  "sliding windows of an [N C H W] tensor as a view [N G C/G OH OW KH KW] (im2col without a copy)"
  (let ((k (pair kernel)) (s (pair stride)) (dl (pair dilation))
        (N (dim X 0)) (C (dim X 1)) (H (dim X 2)) (W (dim X 3))
        (KH (nth k 0)) (KW (nth k 1)) (SH (nth s 0)) (SW (nth s 1)) (DH (nth dl 0)) (DW (nth dl 1))
        (OH (+ (idiv (- H (* DH (- KH 1)) 1) SH) 1))
        (OW (+ (idiv (- W (* DW (- KW 1)) 1) SW) 1))
        (CG (idiv C groups)))
    (if (known? OH) (assert (> OH 0) "windows: a kernel of" KH "x" KW "with dilation" DH "x" DW
                             "is larger than the (padded) input of" H "x" W "(output size" OH "x" OW ")"))
    (if (known? OW) (assert (> OW 0) "windows: a kernel of" KH "x" KW "with dilation" DH "x" DW
                             "is larger than the (padded) input of" H "x" W "(output size" OH "x" OW ")"))
    (VIEW X :strided [[N groups CG OH OW KH KW]
                      [(* C H W) (* CG H W) (* H W) (* SH W) SW (* DH W) DW]
                      0])))

(composite strided-view ((X{T}[...]) -> (Y{T}[...]) &key (size []) (stride []) (offset 0))
  "X read as a view of :size with element :stride and :offset over its row-major layout (N-d sliding windows)"
  (VIEW X :strided [size stride offset]))

(composite conv2d ((X{T}[...] Wt{T}[...]) -> (Y{T}[...]) &key (stride 1) (padding 0) (dilation 1) (groups 1))
  "2-D convolution, NCHW input, OIHW weights"
  ;; the expansion's own gradient of X transposes the overlapping windows into one GEMM per
  ;; window position and a sum of placed slices; this one is the usual transposed convolution:
  ;; dY with stride-1 zeros between its elements, padded by dilation*(K-1) - padding (and the
  ;; rows the forward's stride left unread), convolved with the flipped kernel whose in and out
  ;; channels trade places within each group -- a convolution, so it runs as the forward does.
  ;; dW is the windows of the padded X against dY, summed over the batch and the positions.
  :vjp ((dY)
        (let ((p (pair padding)) (s (pair stride)) (dl (pair dilation))
              (N (dim X 0)) (C (dim X 1)) (H (dim X 2)) (W (dim X 3))
              (O (dim Wt 0)) (CG (dim Wt 1)) (KH (dim Wt 2)) (KW (dim Wt 3))
              (OG (idiv O groups)) (OH (dim dY 2)) (OW (dim dY 3))
              (SH (nth s 0)) (SW (nth s 1))
              (xp (VIEW X :pad [[0 0] [0 0] [(nth p 0) (nth p 0)] [(nth p 1) (nth p 1)]]))
              (win (windows xp :kernel [KH KW] :stride stride :dilation dilation :groups groups))
              (dw (sum (MUL (VIEW dY :reshape [N groups OG 1 OH OW 1 1]) (VIEW win :unsqueeze 2)) :axis [0 4 5]))
              (dys (if (and (= SH 1) (= SW 1)) dY
                       (VIEW (VIEW (VIEW (VIEW dY :reshape [N O OH 1 OW 1])
                                         :pad [[0 0] [0 0] [0 0] [0 (- SH 1)] [0 0] [0 (- SW 1)]])
                                   :reshape [N O (* OH SH) (* OW SW)])
                             :shrink [[0 N] [0 O] [0 (+ (* (- OH 1) SH) 1)] [0 (+ (* (- OW 1) SW) 1)]])))
              (lh (- (* (nth dl 0) (- KH 1)) (nth p 0)))
              (lw (- (* (nth dl 1) (- KW 1)) (nth p 1)))
              (hh (+ lh (- (+ H (* 2 (nth p 0))) (* (nth dl 0) (- KH 1)) 1 (* (- OH 1) SH))))
              (hw (+ lw (- (+ W (* 2 (nth p 1))) (* (nth dl 1) (- KW 1)) 1 (* (- OW 1) SW))))
              (padded (VIEW dys :pad [[0 0] [0 0] [(if (< lh 0) 0 lh) (if (< hh 0) 0 hh)]
                                      [(if (< lw 0) 0 lw) (if (< hw 0) 0 hw)]]))
              (dyp (VIEW padded :shrink [[0 N] [0 O]
                                         [(if (< lh 0) (- 0 lh) 0) (- (dim padded 2) (if (< hh 0) (- 0 hh) 0))]
                                         [(if (< lw 0) (- 0 lw) 0) (- (dim padded 3) (if (< hw 0) (- 0 hw) 0))]]))
              (wt (VIEW (VIEW (VIEW Wt :reshape [groups OG CG KH KW]) :permute [0 2 1 3 4])
                        :reshape [C OG KH KW]))
              (dx (conv2d dyp (VIEW wt :flip [2 3]) :dilation dilation :groups groups)))
          (return dx (VIEW dw :reshape [O CG KH KW]))))
  (assert (= (rank X) 4) "conv2d needs an [N C H W] input")
  (assert (= (rank Wt) 4) "conv2d needs [O C/groups KH KW] weights")
  (assert (same-dim? (dim X 1) (* groups (dim Wt 1))) "conv2d: input channels differ from weights' C * groups")
  (let ((p (pair padding))
        (xp (VIEW X :pad [[0 0] [0 0] [(nth p 0) (nth p 0)] [(nth p 1) (nth p 1)]]))
        (win (windows xp :kernel [(dim Wt 2) (dim Wt 3)] :stride stride :dilation dilation :groups groups))
        (O (dim Wt 0))
        (OG (idiv O groups))
        (w (VIEW Wt :reshape [1 groups OG (dim Wt 1) 1 1 (dim Wt 2) (dim Wt 3)]))
        (y (sum (MUL (VIEW win :unsqueeze 2) w) :axis [3 6 7])))
    (VIEW y :reshape [(dim X 0) O (dim y 3) (dim y 4)])))
(composite conv2d ((X{T}[...] Wt{T}[...] b{T}[...]) -> (Y{T}[...])
                   &key (stride 1) (padding 0) (dilation 1) (groups 1))
  "2-D convolution with a bias per output channel"
  (ADD (conv2d X Wt :stride stride :padding padding :dilation dilation :groups groups)
       (VIEW b :reshape [1 (dim b 0) 1 1])))

(composite max-pool2d ((X{T}[...]) -> (Y{T}[...]) &key (kernel 2) (stride nil) (padding 0))
  "maximum over KxK windows (stride defaults to the kernel)"
  (let ((p (pair padding))
        (xp (if (= (+ (nth p 0) (nth p 1)) 0) X
                (pad X [[0 0] [0 0] [(nth p 0) (nth p 0)] [(nth p 1) (nth p 1)]]
                     :value (if (float? X) -inf (min X)))))  ; integers: no window is all padding
        (win (windows xp :kernel kernel :stride (if (nil? stride) kernel stride))))
    (VIEW (max win :axis [5 6]) :squeeze 1)))
(composite avg-pool2d ((X{T}[...]) -> (Y{T}[...]) &key (kernel 2) (stride nil) (padding 0))
  "mean over KxK windows (zero padding counts, as torch's default)"
  (let ((p (pair padding))
        (xp (VIEW X :pad [[0 0] [0 0] [(nth p 0) (nth p 0)] [(nth p 1) (nth p 1)]]))
        (win (windows xp :kernel kernel :stride (if (nil? stride) kernel stride))))
    (VIEW (mean win :axis [5 6]) :squeeze 1)))

(composite cross-entropy ((logits{T}[...] onehot{T}[...]) -> (Y{T}[...]))
  "mean over the batch of -sum(onehot * log_softmax(logits))"
  :vjp ((dY)
        ;; the batch is the broadcast of both operands' leading axes (a [K] target serves every row)
        (let ((n (CAST (count (sum (+ logits onehot) :axis -1)) (dtype logits)))
              (lp (log-softmax logits :axis -1))
              (s (/ dY n)))
          (return (* s (- (* (exp lp) (sum onehot :axis -1 :keepdims true)) onehot))
                  (* s (NEG lp)))))
  (mean (NEG (sum (MUL onehot (log-softmax logits :axis -1)) :axis -1))))
(composite mse ((A{T}[...] B{T}[...]) -> (Y{T}[...])) "mean squared error" (let ((d (- A B))) (mean (MUL d d))))
