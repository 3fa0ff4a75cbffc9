;;; Elementwise math on float tensors, built on EXP2, LOG2, SIN, SQRT and RECIP.

(composite exp ((X{T}[...]) -> (Y{T}[...])) "e**x" (EXP2 (MUL X 1.4426950408889634)))
(composite log ((X{T}[...]) -> (Y{T}[...])) "natural logarithm" (MUL (LOG2 X) 0.6931471805599453))
(composite exp2 ((X{T}[...]) -> (Y{T}[...])) "2**x" (EXP2 X))
(composite log2 ((X{T}[...]) -> (Y{T}[...])) "base-2 logarithm" (LOG2 X))
(composite sqrt ((X{T}[...]) -> (Y{T}[...])) "square root" (SQRT X))
(composite rsqrt ((X{T}[...]) -> (Y{T}[...])) "1/sqrt(x)" (RECIP (SQRT X)))
(composite sin ((X{T}[...]) -> (Y{T}[...])) "sine" (SIN X))
(composite cos ((X{T}[...]) -> (Y{T}[...]))
  "cosine: sin(x + pi/2), the shift done in f64 for f32 and narrower; 1 - 2 sin(x/2)^2 for huge |x|"
  (let ((h (SIN (MUL X 0.5)))
        (far (- 1 (* 2 h h))))
    (if (= (bits X) 64)
        (WHERE (CMPLT (abs X) 16384) (SIN (ADD (NEG X) 1.5707963267948966)) far)
        (WHERE (CMPLT (abs X) 1048576) (CAST (SIN (ADD (CAST X f64) 1.5707963267948966)) (dtype X)) far))))
(composite tan ((X{T}[...]) -> (Y{T}[...])) "tangent" (/ (sin X) (cos X)))

(composite sigmoid ((X{T}[...]) -> (Y{T}[...])) "1/(1+e**-x)"
  :vjp ((dY) (* dY Y (- 1 Y)))
  (RECIP (ADD 1 (exp (NEG X)))))
(composite tanh ((X{T}[...]) -> (Y{T}[...]))
  "hyperbolic tangent, via e**-2|x| so that it never overflows (a zero keeps its sign)"
  :vjp ((dY) (* dY (- 1 (* Y Y))))
  (let ((t (exp (MUL (abs X) -2))))
    (WHERE (= X 0) X (MUL (sign X) (/ (- 1 t) (+ 1 t))))))
(composite relu ((X{T}[...]) -> (Y{T}[...])) "max(x, 0); the gradient is 0 where x <= 0 (at 0 too) and passes elsewhere, nan included (torch's)"
  :vjp ((dY) (WHERE (<= X 0) 0 dY))
  (MAX X 0))
(composite silu ((X{T}[...]) -> (Y{T}[...])) "x * sigmoid(x)" (MUL X (sigmoid X)))
(composite elu ((X{T}[...]) -> (Y{T}[...])) "x if x > 0 else e**x - 1 (alpha 1)" (WHERE (CMPLT 0 X) X (- (exp X) 1)))
(composite selu ((X{T}[...]) -> (Y{T}[...]))
  "scale * (x if x > 0 else alpha (e**x - 1))"
  (MUL 1.0507009873554805 (WHERE (CMPLT 0 X) X (MUL 1.6732632423543772 (- (exp X) 1)))))
(composite log1p ((X{T}[...]) -> (Y{T}[...]))
  "log(1 + x), accurate for small x (Kahan: log(u) * x / (u - 1) with u = 1 + x; inf at inf)"
  :vjp ((dY) (/ dY (+ 1 X)))
  (let ((u (+ 1 X)))
    (WHERE (= u 1) X (WHERE (= u inf) u (/ (* (log u) X) (- u 1))))))
(composite softplus ((X{T}[...]) -> (Y{T}[...]))
  "log(1 + e**x), computed stably as max(x, 0) + log1p(e**-|x|)"
  :vjp ((dY) (* dY (sigmoid X)))
  (+ (MAX X 0) (log1p (exp (NEG (abs X))))))

(composite horner ((S{T}[...] &rest cs) -> (Y{T}[...]))
  "the polynomial c0 + s*(c1 + s*(c2 + ...)) by Horner's rule"
  (setf acc (nth cs -1))
  (dotimes (i (- (len cs) 1))
    (setf acc (+ (nth cs (- (len cs) (+ i 2))) (* S acc))))
  acc)

;;; fdlibm's f64 erf pieces, shared by erf and erfc
(composite erf-mid ((A{T}[...]) -> (Y{T}[...]))
  "P(a-1)/Q(a-1), where erf(a) = 0.845062911510467529297 + P/Q for 0.84375 <= a < 1.25 (fdlibm)"
  (let ((s2 (- A 1)))
    (/ (horner s2 -2.36211856075265944077e-03 4.14856118683748331666e-01
                  -3.72207876035701323847e-01 3.18346619901161753674e-01
                  -1.10894694282396677476e-01 3.54783043256182359371e-02
                  -2.16637559486879084300e-03)
       (horner s2 1 1.06420880400844228286e-01 5.40397917702171048937e-01
                  7.18286544141962662868e-02 1.26171219808761642112e-01
                  1.36370839120290507362e-02 1.19844998467991074170e-02))))
(composite dd-square-err ((A{T}[...]) -> (E{T}[...]))
  "a^2 - fl(a^2) exactly (Dekker's product through Veltkamp's split; no fma needed)"
  (let ((c (* A 134217729.0))
        (h (- c (- c A)))
        (l (- A h)))
    (- (+ (- (* h h) (* A A)) (* 2 (* h l))) (NEG (* l l)))))
(composite exp-dd ((H{T}[...] E{T}[...] C{T}[...] D{T}[...]) -> (Y{T}[...]))
  "e**(h - e + c + d) for f64 h, its tiny correction e and small c + d, to a few ulp: the exponent and its product with log2(e) kept in double-double, so that a large exponent does not cost |exponent| ulp as exp's rounded 2**(x log2 e) does"
  ;; th + tl = h + (c + d) - e (Knuth's two-sum); p + q = th log2(e) + tl log2(e) (Dekker's
  ;; product, log2(e) itself as hi + lo), then e**t = 2**p (1 + q ln 2), q being below an ulp of p
  (let ((cd (+ C D))
        (th (+ H cd))
        (bb (- th H))
        (tl (- (+ (- H (- th bb)) (- cd bb)) E))
        (p (* th 1.4426950408889634))
        (c1 (* th 134217729.0))
        (h1 (- c1 (- c1 th)))
        (l1 (- th h1))
        (perr (+ (+ (+ (- (* h1 1.4426950514316559) p) (* h1 -1.0542692496784412e-08)) (* l1 1.4426950514316559))
                 (* l1 -1.0542692496784412e-08)))
        (q (+ perr (+ (* th 2.0355273740931033e-17) (* tl 1.4426950408889634)))))
    (* (EXP2 p) (+ 1 (* q 0.6931471805599453)))))
(composite exp-f64 ((X{T}[...]) -> (Y{T}[...]))
  "e**x to a few ulp in f64 through exp-dd (exp's 2**(x log2 e) errs by about |x| ulp); the hyperbolic functions' exp"
  (where (< (abs X) 1000) (exp-dd X 0 0 0) (exp X)))
(composite erf-tail ((A{T}[...]) -> (Y{T}[...]))
  "erfc(a) for a >= 1.25: exp(-a^2 - 0.5625 + R(1/a^2)/S(1/a^2)) / a, two fits split at 1/0.35 (fdlibm)"
  (let ((s3 (recip (* A A)))
        (near (< A 2.857142857142857))
        (R (where near
                  (horner s3 -9.86494403484714822705e-03 -6.93858572707181764372e-01
                                 -1.05586262253232909814e+01 -6.23753324503260060396e+01
                                 -1.62396669462573470355e+02 -1.84605092906711035994e+02
                                 -8.12874355063065934246e+01 -9.81432934416914548592e+00)
                      (horner s3 -9.86494292470009928597e-03 -7.99283237680523006574e-01
                                 -1.77579549177547519889e+01 -1.60636384855821916062e+02
                                 -6.37566443368389627722e+02 -1.02509513161107724954e+03
                                 -4.83519191608651397019e+02)))
            (S (where near
                      (horner s3 1 1.96512716674392571292e+01 1.37657754143519042600e+02
                                 4.34565877475229228821e+02 6.45387271733267880336e+02
                                 4.29008140027567833386e+02 1.08635005541779435134e+02
                                 6.57024977031928170135e+00 -6.04244152148580987438e-02)
                      (horner s3 1 3.03380607434824582924e+01 3.25792512996573918826e+02
                                 1.53672958608443695994e+03 3.19985821950859553908e+03
                                 2.55305040643316442583e+03 4.74528541206955367215e+02
                                 -2.24409524465858183362e+01))))
    (/ (exp-dd (NEG (* A A)) (dd-square-err A) -0.5625 (/ R S)) A)))

(composite erf ((X{T}[...]) -> (Y{T}[...]))
  "the error function: in f64 by fdlibm's rational approximations on four ranges (about 1 ulp); in narrower floats by two polynomial fits (within 3 ulp in f32, a fifth of the work)"
  :vjp ((dY) (* dY 1.1283791670955126 (exp (NEG (* X X)))))
  ;; f32: |x| < 1: x P(x^2) (relative error 4e-8); 1 <= |x| <= 3.92: 1 - Q(|x| - 2.25), Q a
  ;; degree-12 fit of erfc on [1, 3.92] (within 1.6 ulp of erf there, every f32 checked; no exp:
  ;; a GELU's erf costs half as much); erf rounds to 1 past 3.92 (a nan takes the Q path and stays nan)
  (if (and (float? X) (< (bits X) 64))
      (let ((a (abs X)))
        (where (< a 1)
               (* X (horner (* X X) 1.1283791278420137 -0.37612354347993704 0.11280405564424498
                                    -0.02671760731169174 0.004924729547121669 -0.0005660085375973063))
               (let ((e (where (< 3.92 a) 1
                               (- 1 (horner (- a 2.25) 0.0014627179410457505 -0.007142606875697562 0.016070171671606983
                                                       -0.021719963515549934 0.019082997427348033 -0.010678736107761504
                                                       0.002909661947799294 0.0007120241374923926 -0.0010162010561320617
                                                       0.00032992822673317054 3.3612656450639015e-05 -4.8415026769636566e-05 9.12480574867382e-06)))))
                 (where (< X 0) (- e) e))))
      (let ((a (abs X))
            (sg (sign X))
            (z (* X X))
            ;; |x| < 0.84375: x + x * P(x^2)/Q(x^2)
            (e1 (+ X (* X (/ (horner z 1.28379167095512558561e-01 -3.25042107247001499370e-01
                                       -2.84817495755985104766e-02 -5.77027029648944159157e-03
                                       -2.37630166566501626084e-05)
                             (horner z 1 3.97917223959155352819e-01 6.50222499887672944485e-02
                                       5.08130628187576562776e-03 1.32494738004321644526e-04
                                       -3.96022827877536812320e-06)))))
            (e2 (* sg (+ 8.45062911510467529297e-01 (erf-mid a))))
            (e3 (* sg (- 1 (erf-tail a)))))
        (where (< a 0.84375) e1 (where (< a 1.25) e2 (where (< a 6) e3 (where (!= X X) X sg)))))))
(composite gelu ((X{T}[...]) -> (Y{T}[...]))
  "x * Phi(x), the exact erf form (torch's default)"
  (* 0.5 X (+ 1 (erf (* X 0.7071067811865476)))))

(composite erfc ((X{T}[...]) -> (Y{T}[...]))
  "1 - erf(x) without cancellation: fdlibm's f64 pieces (a few ulp); narrower floats in f64"
  :vjp ((dY) (* dY -1.1283791670955126 (exp (NEG (* X X)))))
  (if (< (bits X) 64)
      (CAST (erfc (CAST X f64)) (dtype X))
      (let ((a (abs X))
            (mid (erf-mid a))
            (tail (erf-tail a)))
        (where (< a 0.84375) (- 1 (erf X))
               (where (< a 1.25)
                      (where (< X 0) (+ 1 (+ 8.45062911510467529297e-01 mid)) (- 1.54937088489532470703e-01 mid))
                      (where (< a 28) (where (< X 0) (- 2 tail) tail)
                             (where (!= X X) X (where (< X 0) (full [] 2.0 :dtype (dtype X)) (full [] 0.0 :dtype (dtype X))))))))))

(composite erfinv ((X{T}[...]) -> (Y{T}[...]))
  "the inverse error function (nan outside [-1, 1], +-inf at +-1): torch's rational first guess and two Newton steps, the residual through erfc near 1; narrower floats in f64"
  :vjp ((dY) (* dY 0.886226925452758 (exp (* Y Y))))
  (if (< (bits X) 64)
      (CAST (erfinv (CAST X f64)) (dtype X))
      (let ((a (abs X))
            (z (* a a))
            (central (/ (* a (horner z 0.886226899 -1.645349621 0.914624893 -0.140543331))
                        (horner z 1 -2.118377725 1.442710462 -0.329097515 0.012229801)))
            (w (SQRT (neg (log (/ (- 1 a) 2)))))
            (outer (/ (horner w -1.970840454 -1.624906493 3.429567803 1.641345311)
                      (horner w 1 3.543889200 1.637067800)))
            (x0 (where (<= a 0.7) central outer)))
        ;; Newton on erf(x) = a: erf(x) - a is (1 - a) - erfc(x) above 0.5 (1 - a exact there)
        (dotimes (i 2)
          (setf r (where (< a 0.5) (- (erf x0) a) (- (- 1 a) (erfc x0))))
          (setf x0 (- x0 (/ r (* 1.1283791670955126 (exp (neg (* x0 x0))))))))
        (where (< 1 a) nan
               (where (= a 1) (where (< X 0) (full [] -inf :dtype (dtype X)) (full [] inf :dtype (dtype X)))
                      (where (= X 0) X (where (< X 0) (neg x0) x0)))))))

(composite expm1 ((X{T}[...]) -> (Y{T}[...]))
  "e**x - 1, accurate for small x (Kahan: (u - 1) x / log u with u = e**x, exp-f64); narrower floats in f64"
  :vjp ((dY) (* dY (+ Y 1)))
  (assert (float? X) "expm1 takes floats (cast an integer tensor first, as caten.Tensor does)")
  (if (< (bits X) 64)
      (CAST (expm1 (CAST X f64)) (dtype X))
      (let ((u (exp-f64 X))
            (um (- u 1)))
        ;; past |x| = 1, u - 1 loses under a bit; below, Kahan's quotient cancels log's error
        (where (< 1 (abs X)) um (where (= u 1) X (/ (* um X) (log u)))))))

(composite log10 ((X{T}[...]) -> (Y{T}[...]))
  "base-10 logarithm, log2(x) log10(2); narrower floats in f64"
  :vjp ((dY) (/ dY (* X 2.302585092994046)))
  (if (< (bits X) 64)
      (CAST (log10 (CAST X f64)) (dtype X))
      (* (LOG2 X) 0.30102999566398120)))
