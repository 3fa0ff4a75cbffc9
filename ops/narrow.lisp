;;; Rounding to narrow number formats (ONNX's float8/float4/int4/int2) that caten has no dtype for.
;;; A narrow value is carried in a wider dtype that holds every value of the format exactly (f32 for
;;; the minifloats, an integer dtype for int4/int2): these composites give the carried value.

(composite round-to-minifloat ((X{T}[...]) -> (Y{T}[...])
                               &key (step 0.001953125) (tiny 0.015625) (maxv 448.0) (over nan)
                               (nanval nan) (negzero true))
  "X rounded, ties to even, to the minifloat with smallest subnormal :step, smallest normal :tiny, largest finite :maxv (above: :over; nan: :nanval; no -0 without :negzero)"
  :vjp ((dY) nil)                                ; flat almost everywhere: no gradient
  ;; q, the format's spacing at |X|, is step * 2**floor(log2(max(|X|, tiny) / tiny)); the power of two
  ;; is found by exact comparisons (five halvings cover 2**0 .. 2**31, more than any format's exponents).
  ;; |X| / q is then exact and below 2**(mantissa + 1); adding and subtracting 2**23 (2**52 for f64)
  ;; rounds it to an integer, ties to even, as IEEE addition does.
  (let ((a (abs X))
        (aa (min a (* tiny 2147483648.0)))
        (u (/ (max aa tiny) tiny))
        (one (full [] 1.0 :dtype (dtype X)))
        (s1 (where (>= u 65536.0) (* one 65536.0) one))
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
  "X as an integer of :modulus values (int4, int2 ...): floats truncated, then wrapped modulo :modulus into [-m/2, m/2) or [0, m); nan and inf give 0"
  ;; floats wrap before the conversion (mod is exact), so no magnitude overflows the conversion
  (let ((n (full [] modulus :dtype (dtype X)))
        (tr (if (float? X) (where (< X 0) (neg (idiv (neg X) 1)) (idiv X 1)) X))
        (w (mod tr n))
        (w2 (if signed (where (>= w (idiv n 2)) (- w n) w) w))
        (w3 (if (float? X) (where (!= w2 w2) 0 w2) w2)))
    (cast w3 i64)))

(composite round-to-e8m0 ((X{f32}[...]) -> (Y{f32}[...]) &key (up true) (nearest false) (saturate true))
  "|X| as a power of two 2**-127 .. 2**127 (FLOAT8E8M0), its exponent rounded :up, :nearest or else down; nan, inf and (without :saturate) overflow give nan"
  ;; :up rounds any fraction up; :nearest rounds a mantissa >= 1/2 up (below 2**-126: one above 2**-127)
  ;; p = 2**floor(log2 |X|) for normal |X| by exact comparisons: from 1 or 2**-126, seven steps of
  ;; 2**64 .. 2**1 reach every exponent (a step that overflows to inf is never taken)
  (let ((a (abs X))
        (lo 5.877471754111438e-39)
        (tiny 1.1754943508222875e-38)
        (s0 (where (>= a 1.0) 1.0 tiny))
        (s1 (where (>= a (* s0 1.8446744073709552e+19)) (* s0 1.8446744073709552e+19) s0))
        (s2 (where (>= a (* s1 4294967296.0)) (* s1 4294967296.0) s1))
        (s3 (where (>= a (* s2 65536.0)) (* s2 65536.0) s2))
        (s4 (where (>= a (* s3 256.0)) (* s3 256.0) s3))
        (s5 (where (>= a (* s4 16.0)) (* s4 16.0) s4))
        (s6 (where (>= a (* s5 4.0)) (* s5 4.0) s5))
        (p (where (>= a (* s6 2.0)) (* s6 2.0) s6))
        (rup (if up (> a p) (if nearest (>= a (* p 1.5)) (< a 0))))
        (top (= p 1.7014118346046923e+38))
        (n (where rup (where top (if saturate p nan) (* p 2.0)) p))
        (sub-up (if up (> a 0) (if nearest (> a lo) (< a 0))))
        (sub (where sub-up tiny lo)))
    (where (or (!= a a) (= a inf)) nan (where (< a tiny) sub n))))
