;;; torch's binary and special elementwise functions (copysign, fmod, lerp, atan2, hypot, logaddexp,
;;; xlogy, nan-to-num, fmax, heaviside...), each from the core ops with its gradient as torch defines
;;; it. Narrow floats compute in f32 and round once, as torch's CPU kernels do; the transcendental
;;; ones compute f32 in f64, so that they are within an ulp of the exact value.

(composite signbit ((X{T}[...]) -> (Y{bool}[...]))
  "the sign bit: true for x < 0 and for -0.0 (a nan's sign is not visible to caten: false)"
  (if (bool? X) (!= X X)
      (if (float? X) (or (< X 0) (and (= X 0) (< (recip X) 0))) (< X 0))))

(composite copysign ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "|a| with the sign bit of b (floats; a nan b counts as positive)"
  :vjp ((dC) (return (* dC (where (= A 0) 0 (/ C (where (= A 0) 1 A)))) nil))
  (where (signbit B) (neg (abs A)) (abs A)))

(composite fmod ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "C's fmod: the remainder of a / b rounded toward zero, with a's sign (exact)"
  :vjp ((dC) (return dC (* (neg dC) (trunc (/ A B)))))
  (if (float? A)
      (let ((r (mod (abs A) (abs B))))
        (where (signbit A) (neg r) r))
      (let ((r (mod A B)))
        (where (and (!= r 0) (!= (< r 0) (< A 0))) (- r B) r))))

(composite lerp ((S{T}[...] E{T}[...] W{T}[...]) -> (Y{T}[...]))
  "s + w (e - s), as torch: e - (e - s)(1 - w) where |w| >= 0.5 (exact at both ends)"
  :vjp ((dY) (return (* dY (- 1 W)) (* dY W) (* dY (- E S))))
  (if (< (bits S) 32)
      (CAST (lerp (CAST S f32) (CAST E f32) (CAST W f32)) (dtype S))
      (let ((d (- E S)))
        (where (< (abs W) 0.5) (+ S (* W d)) (- E (* d (- 1 W)))))))

(composite atan2 ((Y{T}[...] X{T}[...]) -> (Z{T}[...]))
  "the angle of the point (x, y) in [-pi, pi], with C99's signed zeros and infinities; f16..f32 in f64"
  :vjp ((dZ)
        (let ((r (+ (* X X) (* Y Y))))
          (return (* dZ (/ X r)) (* dZ (/ (neg Y) r)))))
  (if (< (bits Y) 64)
      (CAST (atan2 (CAST Y f64) (CAST X f64)) (dtype Y))
      (let ((q (atan (/ Y X)))
            (pi (where (signbit Y) (full [] -3.141592653589793 :dtype (dtype Y)) (full [] 3.141592653589793 :dtype (dtype Y))))
            (base (where (signbit X) (+ q pi) q))
            (zeros (where (signbit X) pi Y))
            (infs (where (signbit X) (* (sign Y) 2.356194490192345) (* (sign Y) 0.7853981633974483))))
        (where (and (= X 0) (= Y 0)) zeros
               (where (and (= (abs X) inf) (= (abs Y) inf)) infs base)))))

(composite hypot ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "sqrt(a^2 + b^2) without overflow (inf if either is infinite, even with a nan); f16..f32 in f64"
  :vjp ((dC) (return (* dC (/ A C)) (* dC (/ B C))))
  (if (< (bits A) 64)
      (CAST (SQRT (+ (* (CAST A f64) (CAST A f64)) (* (CAST B f64) (CAST B f64)))) (dtype A))
      (let ((a (abs A))
            (b (abs B))
            (m (max a b))
            (n (min a b))
            (r (/ n (where (= m 0) 1 m))))
        (where (or (= a inf) (= b inf)) inf (where (= m 0) 0 (* m (SQRT (+ 1 (* r r)))))))))

(composite logaddexp ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "log(e^a + e^b) (f16..f32 in f64), as torch: max(a, b) + log1p(e^-|a - b|), a itself where a = b is infinite"
  :vjp ((dC) (return (/ dC (+ 1 (exp (- B A)))) (/ dC (+ 1 (exp (- A B))))))
  (if (< (bits A) 64)
      (CAST (logaddexp (CAST A f64) (CAST B f64)) (dtype A))
      (where (and (= A B) (= (abs A) inf)) A
             (+ (max A B) (log1p (exp (neg (abs (- A B)))))))))

(composite logaddexp2 ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "log2(2^a + 2^b) (f16..f32 in f64), as torch: max(a, b) + log1p(2^-|a - b|) / ln 2, a itself where a = b is infinite"
  :vjp ((dC) (return (/ dC (+ 1 (exp2 (- B A)))) (/ dC (+ 1 (exp2 (- A B))))))
  (if (< (bits A) 64)
      (CAST (logaddexp2 (CAST A f64) (CAST B f64)) (dtype A))
      (where (and (= A B) (= (abs A) inf)) A
             (+ (max A B) (* (log1p (exp2 (neg (abs (- A B))))) 1.4426950408889634)))))

(composite xlogy ((X{T}[...] Y{T}[...]) -> (Z{T}[...]))
  "x log(y), 0 where x = 0 unless y is nan (torch.xlogy)"
  :vjp ((dZ) (return (where (and (= X 0) (<= Y 0)) 0 (xlogy dZ Y)) (* dZ (/ X Y))))
  (where (!= Y Y) Y (where (= X 0) 0 (* X (log Y)))))

(composite xlog1py ((X{T}[...] Y{T}[...]) -> (Z{T}[...]))
  "x log1p(y), 0 where x = 0 unless y is nan (torch.special.xlog1py)"
  :vjp ((dZ) (return (where (and (= X 0) (<= Y -1)) 0 (xlog1py dZ Y)) (* dZ (/ X (+ Y 1)))))
  (where (!= Y Y) Y (where (= X 0) 0 (* X (log1p Y)))))

(composite nan-to-num ((X{T}[...]) -> (Y{T}[...]) &key (nanv 0.0) (posv 3.4028234663852886e38) (negv -3.4028234663852886e38))
  "nan, +inf and -inf replaced by :nanv, :posv and :negv (integers: x itself)"
  :vjp ((dY) (* dY (cast (< (abs X) inf) (dtype X))))
  (if (float? X)
      (where (!= X X) nanv (where (= X inf) posv (where (= X -inf) negv X)))
      X))

(composite fmax ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "the larger of a and b, ignoring a nan (nan only if both are)"
  ;; torch's gradient: halves at a tie; otherwise to each side that does not lose (a nan loses nothing)
  :vjp ((dC)
        (let ((tie (= A B)))
          (return (where tie (* dC 0.5) (where (< A B) 0 dC))
                  (where tie (* dC 0.5) (where (< B A) 0 dC)))))
  (where (!= A A) B (where (!= B B) A (max A B))))

(composite fmin ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "the smaller of a and b, ignoring a nan (nan only if both are)"
  ;; torch's gradient: halves at a tie; otherwise to each side that does not lose (a nan loses nothing)
  :vjp ((dC)
        (let ((tie (= A B)))
          (return (where tie (* dC 0.5) (where (> A B) 0 dC))
                  (where tie (* dC 0.5) (where (> B A) 0 dC)))))
  (where (!= A A) B (where (!= B B) A (min A B))))

(composite remainder ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "a - b floor(a / b), the divisor's sign, as torch's % (a zero keeps a's sign, where numpy's takes b's)"
  :vjp ((dC) (return dC (* (neg dC) (idiv A B))))
  (let ((r (mod A B)))
    (if (float? A) (where (= r 0) (* A 0) r) r)))

(composite heaviside ((X{T}[...] V{T}[...]) -> (Y{T}[...]))
  "0 for x < 0 (and nan), v for x = 0, 1 for x > 0"
  :vjp ((dY) (return nil nil))
  (where (= X 0) V (cast (< 0 X) (dtype X))))

(composite fma ((A{T}[...] B{T}[...] C{T}[...]) -> (Y{T}[...]))
  "a b + c with one rounding (torch's CPU addcmul): f16..f32 in f64, where the product is exact; f64 by Dekker's exact product and Knuth's two-sum (faithful: within an ulp, almost always the rounded value)"
  :vjp ((dY) (return (* dY B) (* dY A) dY))
  (if (< (bits A) 64)
      (CAST (+ (* (CAST A f64) (CAST B f64)) (CAST C f64)) (dtype A))
      (let ((p (* A B))
            (ca (* A 134217729.0))
            (ah (- ca (- ca A)))
            (al (- A ah))
            (cb (* B 134217729.0))
            (bh (- cb (- cb B)))
            (bl (- B bh))
            (e (+ (+ (+ (- (* ah bh) p) (* ah bl)) (* al bh)) (* al bl)))
            (s (+ p C))
            (bb (- s p))
            (serr (+ (- p (- s bb)) (- C bb))))
        (where (< (abs p) 1e300) (+ s (+ e serr)) s))))

(composite angle ((X{T}[...]) -> (Y{T}[...]))
  "the argument of a real number: pi below 0, 0 otherwise, nan for nan (torch.angle)"
  :vjp ((dY) nil)
  (where (!= X X) X (where (< X 0) (full [] 3.141592653589793 :dtype (dtype X)) (full [] 0.0 :dtype (dtype X)))))

(composite deg2rad ((X{T}[...]) -> (Y{T}[...]))
  "x pi / 180 (f16 and bf16 in f32, as torch)"
  (if (< (bits X) 32) (CAST (* (CAST X f32) 0.017453292519943295) (dtype X)) (* X 0.017453292519943295)))

(composite rad2deg ((X{T}[...]) -> (Y{T}[...]))
  "x 180 / pi (f16 and bf16 in f32, as torch)"
  (if (< (bits X) 32) (CAST (* (CAST X f32) 57.29577951308232) (dtype X)) (* X 57.29577951308232)))

(composite logit ((X{T}[...]) -> (Y{T}[...]) &key (eps nil))
  "log(x / (1 - x)), x first clamped to [eps, 1 - eps] when :eps is given (torch.logit)"
  :vjp ((dY)
        (let ((g (/ dY (* X (- 1 X)))))
          (if (nil? eps)
              (where (or (< X 0) (> X 1)) nan g)
              (let ((lo (full [] eps :dtype (dtype X))))
                (where (or (< X lo) (> X (- 1 lo))) 0 g)))))
  (if (< (bits X) 32)
      (CAST (logit (CAST X f32) :eps eps) (dtype X))
      (let ((x (if (nil? eps) X
                   (let ((lo (full [] eps :dtype (dtype X)))
                         (hi (- 1 lo)))
                     (where (< X lo) lo (where (> X hi) hi X))))))
        (log (/ x (- 1 x))))))

(composite sinc ((X{T}[...]) -> (Y{T}[...]))
  "sin(pi x) / (pi x), 1 at 0 (computed in x's dtype, as torch)"
  :vjp ((dY)
        (let ((p (* X 3.141592653589793)))
          (* dY (where (= X 0) 0 (/ (- (* p (cos p)) (sin p)) (* p X))))))
  (if (< (bits X) 32)
      (CAST (sinc (CAST X f32)) (dtype X))
      (let ((p (* X 3.141592653589793)))
        (where (= X 0) 1 (/ (sin p) p)))))
