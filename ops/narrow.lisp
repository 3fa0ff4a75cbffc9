;;; Rounding to narrow number formats (ONNX's float8/float4/int4/int2) that caten has no dtype for.
;;; A narrow value is carried in a wider dtype that holds every value of the format exactly (f32 for
;;; the minifloats, an integer dtype for int4/int2): these composites give the carried value.

(composite round-to-minifloat ((X{T}[...]) -> (Y{T}[...])
                               &key (step 0.001953125) (tiny 0.015625) (maxv 448.0) (over nan)
                               (nanval nan) (negzero true))
  "X rounded to the nearest value (ties to even) of a minifloat whose smallest subnormal is :step,
smallest normal :tiny and largest finite :maxv; a magnitude rounding above :maxv gives :over (signed),
nan gives :nanval; without :negzero a zero result is +0 (the FNUZ formats)"
  ;; q, the format's spacing at |X|, is step * 2**floor(log2(max(|X|, tiny) / tiny)); the power of two
  ;; is found by exact comparisons (five halvings cover 2**0 .. 2**31, more than any format's exponents).
  ;; |X| / q is then exact and below 2**(mantissa + 1); adding and subtracting 2**23 (2**52 for f64)
  ;; rounds it to an integer, ties to even, as IEEE addition does.
  (let ((a (abs X))
        (aa (min a (* tiny 2147483648.0)))
        (u (/ (max aa tiny) tiny))
        (s1 (where (>= u 65536.0) 65536.0 1.0))
        (s2 (where (>= u (* s1 256.0)) (* s1 256.0) s1))
        (s3 (where (>= u (* s2 16.0)) (* s2 16.0) s2))
        (s4 (where (>= u (* s3 4.0)) (* s3 4.0) s3))
        (s5 (where (>= u (* s4 2.0)) (* s4 2.0) s4))
        (q (* s5 step))
        (big (if (= (bits X) 64) 4503599627370496.0 8388608.0))
        (r (* (- (+ (/ aa q) big) big) q))
        (m (where (> r maxv) over r))
        (signed (where (< X 0) (neg m) m))
        (zero (if negzero (* X 0) (zeros [] :dtype (dtype X)))))
    (where (!= X X) nanval (where (= r 0) zero signed))))

(composite wrap-int ((X{T}[...]) -> (Y{i64}[...]) &key (modulus 16) (signed true))
  "X converted to a integer of :modulus values as ml_dtypes and C do: floats truncated toward zero, then
wrapped modulo :modulus into [-modulus/2, modulus/2) (signed) or [0, modulus); nan and inf give 0"
  ;; floats wrap before the conversion (mod is exact), so no magnitude overflows the conversion
  (let ((n (full [] modulus :dtype (dtype X)))
        (tr (if (float? X) (where (< X 0) (neg (idiv (neg X) 1)) (idiv X 1)) X))
        (w (mod tr n))
        (w2 (if signed (where (>= w (idiv n 2)) (- w n) w) w))
        (w3 (if (float? X) (where (!= w2 w2) 0 w2) w2)))
    (cast w3 i64)))
