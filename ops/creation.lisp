;;; Creation: constants, ranges and counter-based random numbers.

(composite full ((shape v) -> (Y{D}[...]) &key (dtype f32)) "a tensor of SHAPE filled with V"
  (CONST v :dtype dtype :shape shape))
(composite zeros ((shape) -> (Y{D}[...]) &key (dtype f32)) "zeros of SHAPE" (CONST 0 :dtype dtype :shape shape))
(composite ones ((shape) -> (Y{D}[...]) &key (dtype f32)) "ones of SHAPE" (CONST 1 :dtype dtype :shape shape))
(composite arange ((n) -> (Y{D}[...]) &key (dtype i64)) "0, 1, ..., n-1"
  (CAST (INDEX [n] :axis 0) dtype))

(composite rand ((shape) -> (Y{D}[...]) &key (seed 0) (dtype f32))
  "uniform in [0, 1): 24 random bits of threefry2x32 scaled by 2**-24 (:seed an integer or an integer scalar tensor)"
  (CAST (MUL (CAST (IDIV (RAND shape :seed seed) 256) f32) 5.960464477539063e-08) dtype))
(composite randn ((shape) -> (Y{D}[...]) &key (seed 0) (dtype f32))
  "standard normal by Box-Muller over two uniform streams (:seed as rand's)"
  (let ((u (rand (cons 2 shape) :seed seed))
        (u1 (- 1 (VIEW u :slice [0] :squeeze 0)))   ; in (0, 1]: log is finite
        (u2 (VIEW u :slice [1] :squeeze 0)))
    (CAST (* (sqrt (* -2 (log u1))) (cos (* 6.283185307179586 u2))) dtype)))
