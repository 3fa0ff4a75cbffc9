;;; Rounding to integers (torch's round, floor, ceil, trunc, frac). An integer or bool tensor is its
;;; own rounding. Floats round by IEEE addition: below 2**p (p the mantissa bits, where every float
;;; is already an integer) |x| + 2**p rounds to an integer, ties to even, and subtracting 2**p is
;;; exact; f16 and bf16 round in f32 (exact both ways). A zero result keeps x's sign, as C's.

(composite round-half-even ((X{T}[...]) -> (Y{T}[...]))
  "x rounded to the nearest integer, ties to even (the helper of the rounding family: floats only)"
  :vjp ((dY) nil)
  (let ((big (if (= (bits X) 64) 4503599627370496.0 8388608.0))
        (a (abs X))
        (r (- (+ a big) big)))
    (where (< a big) (where (= r 0) (* X 0) (where (< X 0) (neg r) r)) X)))

(composite rounded ((X{T}[...] mode) -> (Y{T}[...]))
  "X rounded by MODE (0 nearest-even, 1 floor, 2 ceil, 3 trunc), f16/bf16 through f32, integers as they are"
  :vjp ((dY) nil)
  (if (not (float? X))
      X
      (if (< (bits X) 32)
          (CAST (rounded (CAST X f32) mode) (dtype X))
          (let ((n (round-half-even X))
                (r (if (= mode 0) n
                       (if (= mode 1) (where (> n X) (- n 1) n)
                           (if (= mode 2) (where (< n X) (+ n 1) n)
                               (where (> (abs n) (abs X)) (- n (sign X)) n))))))
            (where (= r 0) (* X 0) r)))))

(composite round ((X{T}[...]) -> (Y{T}[...])) "nearest integer, ties to even (torch.round)" :vjp ((dY) nil) (rounded X 0))
(composite floor ((X{T}[...]) -> (Y{T}[...])) "largest integer <= x" :vjp ((dY) nil) (rounded X 1))
(composite ceil ((X{T}[...]) -> (Y{T}[...])) "smallest integer >= x" :vjp ((dY) nil) (rounded X 2))
(composite trunc ((X{T}[...]) -> (Y{T}[...])) "x rounded toward zero" :vjp ((dY) nil) (rounded X 3))
(composite frac ((X{T}[...]) -> (Y{T}[...]))
  "x - trunc(x), the sign of x (torch.frac: nan for +-inf; float only)"
  :vjp ((dY) dY)
  (- X (trunc X)))

(composite frexp ((X{T}[...]) -> (M{T}[...] E{i32}[...]))
  "x = m 2**e with 0.5 <= |m| < 1 (m = x, e = 0 for zeros, infinities and nan), as C's frexp; computed in f64, where every float's power of two is exact"
  :vjp ((dM dE) nil)
  (let ((x (CAST X f64))
        (a (abs x))
        (l (floor (LOG2 (where (and (< 0 a) (< a inf)) a 1))))
        (p (EXP2 l))
        ;; log2 rounded to an integer just below a power of two: one step either way fixes it
        (k (where (< a p) (- l 1) (where (<= (* p 2) a) (+ l 1) l)))
        (m (* (/ x (EXP2 k)) 0.5))
        (plain (or (= a 0) (not (< a inf)))))
    (return (CAST (where plain x m) (dtype X)) (CAST (where plain 0 (+ k 1)) i32))))

(composite nextafter ((X{T}[...] Y{T}[...]) -> (Z{T}[...]) &key (digits 53) (tiny -1074) (big 1.7976931348623157e308))
  "the float after x toward y in a format of :digits significand bits, smallest power of two 2**:tiny and largest value :big (y where x = y; nan if either is)"
  :vjp ((dZ) (return dZ (* dZ 0)))  ; a step of one ulp: slope 1 in x, 0 in y
  (assert (float? X) "nextafter takes floats (cast an integer tensor first, as caten.Tensor does)")
  (let ((x (CAST X f64))
        (y (CAST Y f64))
        (a (abs x))
        (l (floor (LOG2 (where (and (< 0 a) (< a inf)) a 1))))
        (p (EXP2 l))
        (k (where (< a p) (- l 1) (where (<= (* p 2) a) (+ l 1) l)))
        (up (< x y))
        ;; toward zero from a power of two the spacing halves (above the subnormals)
        (down (and (!= up (< 0 x)) (= a (EXP2 k))))
        (e (max (- (- k (- digits 1)) (cast down f64)) (full [] tiny :dtype f64)))
        (step (EXP2 e))
        (r (where up (+ x step) (- x step)))
        (least (EXP2 (full [] tiny :dtype f64)))
        (z (where (or (!= x x) (!= y y)) (+ x y)
                  (where (= x y) y
                         (where (= x 0) (where up least (neg least))
                                (where (= a inf) (where (< 0 x) big (neg (full [] big :dtype f64))) r))))))
    (CAST z (dtype X))))
