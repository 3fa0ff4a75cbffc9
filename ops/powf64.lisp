;;; f64 pow's magnitude to a few ulp. 2**(b log2 x) in plain f64 errs by about |b log2 x| ulp
;;; (log2's rounding, scaled by b), so log2 x is computed in double-double: x = m * 2**n exactly,
;;; log m = 2 atanh(s), s = (m-1)/(m+1), with s and the products carried as hi + lo pairs
;;; (Dekker's exact product via Veltkamp's split; Knuth's two-sum). Every step is an IEEE op
;;; the renderers keep as written (no contraction, no reassociation).

(composite pow-f64-magnitude ((X{f64}[...] B{f64}[...] P{f64}[...]) -> (Y{f64}[...]))
  "x ** b (x > 0 finite, |b| < 1e300, f64) to about 2 ulp through a double-double log2; P elsewhere"
  ;; x**b's own derivatives where it is computed (b y / x, y log x), P's elsewhere: the expansion's
  ;; gradient would send 0 * nan from the branch not taken
  :vjp ((dY)
        (let ((ok (AND (AND (CMPLT 0 X) (CMPLT X inf)) (CMPLT (abs B) 1e300)))
              (x (WHERE ok X 1)))
          (return (WHERE ok (* dY (/ (* B Y) x)) 0)
                  (WHERE ok (* dY (* Y (log x))) 0)
                  (WHERE ok 0 dY))))
  (let ((n (IDIV (ADD (LOG2 X) 0.5) 1))
        ;; 2**-n as two exact halves built by squaring (each within f64's range)
        (k1 (IDIV (NEG n) 2))
        (k2 (ADD (NEG n) (NEG k1)))
        (s1 (CONST 1 :dtype f64 :shape (shape X)))
        (s2 s1)
        (b1 (WHERE (CMPLT k1 0) (MUL s1 0.5) (MUL s1 2)))
        (b2 (WHERE (CMPLT k2 0) (MUL s1 0.5) (MUL s1 2)))
        (e1 (abs k1))
        (e2 (abs k2)))
    (dotimes (i 11)
      (setf s1 (WHERE (= (MOD e1 2) 1) (MUL s1 b1) s1))
      (setf s2 (WHERE (= (MOD e2 2) 1) (MUL s2 b2) s2))
      (setf b1 (MUL b1 b1))
      (setf b2 (MUL b2 b2))
      (setf e1 (IDIV e1 2))
      (setf e2 (IDIV e2 2)))
    (let ((m (MUL (MUL X s1) s2))                 ; in [0.70, 1.42], exact
          (f (ADD m -1))                          ; exact (Sterbenz)
          (dh (ADD m 1))                          ; m + 1 = dh + dl (two-sum)
          (bb (ADD dh (NEG m)))
          (dl (ADD (ADD m (NEG (ADD dh (NEG bb)))) (ADD 1 (NEG bb))))
          (sh (FDIV f dh))
          ;; f - sh * (dh + dl), with sh * dh exact
          (c1 (MUL sh 134217729)) (shh (ADD c1 (NEG (ADD c1 (NEG sh))))) (shl (ADD sh (NEG shh)))
          (c2 (MUL dh 134217729)) (dhh (ADD c2 (NEG (ADD c2 (NEG dh))))) (dhl (ADD dh (NEG dhh)))
          (p (MUL sh dh))
          (pe (ADD (ADD (ADD (ADD (MUL shh dhh) (NEG p)) (MUL shh dhl)) (MUL shl dhh)) (MUL shl dhl)))
          (sl (FDIV (ADD (ADD (ADD f (NEG p)) (NEG pe)) (NEG (MUL sh dl))) dh))
          ;; log m = 2s + (2/3)s**3 + s**5 (2/5 + (2/7)s**2 + ...): s and (2/3)s**3 in double-double,
          ;; the rest (< 2e-4 of log m) in f64; |s| < 0.176, so 10 more terms reach 2**-70
          (zh (MUL sh sh))
          (ze (ADD (ADD (ADD (MUL shh shh) (NEG zh)) (MUL (MUL shh shl) 2)) (MUL shl shl)))
          (c6 (MUL zh 134217729)) (zhh (ADD c6 (NEG (ADD c6 (NEG zh))))) (zhl (ADD zh (NEG zhh)))
          (ch (MUL zh sh))
          (cl (ADD (ADD (ADD (ADD (ADD (MUL zhh shh) (NEG ch)) (MUL zhh shl)) (MUL zhl shh)) (MUL zhl shl))
                   (MUL ze sh)))
          (c7 (MUL ch 134217729)) (chh (ADD c7 (NEG (ADD c7 (NEG ch))))) (chl (ADD ch (NEG chh)))
          (kh (MUL ch 0.6666666666666666))
          (kl (ADD (ADD (ADD (ADD (ADD (ADD (MUL chh 0.6666666716337204) (NEG kh)) (MUL chh -4.967053768289986e-09))
                                   (MUL chl 0.6666666716337204))
                              (MUL chl -4.967053768289986e-09))
                         (MUL ch 3.700743415417188e-17))
                    (MUL cl 0.6666666666666666)))
          (rest (MUL (MUL (MUL sh zh) zh)
                     (horner zh 0.4 0.2857142857142857 0.2222222222222222 0.18181818181818182 0.15384615384615385
                                0.13333333333333333 0.11764705882352941 0.10526315789473684 0.09523809523809523
                                0.08695652173913043)))
          (lh (MUL sh 2))
          (a1 (ADD lh kh))                        ; two-sum lh + kh
          (bb2 (ADD a1 (NEG lh)))
          (e1 (ADD (ADD lh (NEG (ADD a1 (NEG bb2)))) (ADD kh (NEG bb2))))
          (lo (ADD e1 (ADD (ADD (ADD (MUL sl 2) kl) (MUL (MUL zh sl) 2)) rest)))
          (Lh (ADD a1 lo))
          (Ll (ADD lo (NEG (ADD Lh (NEG a1)))))
          ;; log2 m = L * (1/ln 2), 1/ln 2 = 1.4426950408889634 + 2.0355273740931033e-17
          (c3 (MUL Lh 134217729)) (Lhh (ADD c3 (NEG (ADD c3 (NEG Lh))))) (Lhl (ADD Lh (NEG Lhh)))
          (Gh (MUL Lh 1.4426950408889634))
          (Ge (ADD (ADD (ADD (ADD (MUL Lhh 1.4426950514316559) (NEG Gh)) (MUL Lhh -1.0542692496784412e-08))
                        (MUL Lhl 1.4426950514316559))
                   (MUL Lhl -1.0542692496784412e-08)))
          (Gl (ADD (ADD Ge (MUL Lh 2.0355273740931033e-17)) (MUL Ll 1.4426950408889634)))
          ;; log2 x = n + G (two-sum)
          (Hh (ADD n Gh))
          (hb (ADD Hh (NEG n)))
          (Hl (ADD (ADD (ADD n (NEG (ADD Hh (NEG hb)))) (ADD Gh (NEG hb))) Gl))
          ;; t = b * log2 x, with b * Hh exact
          (c4 (MUL B 134217729)) (bh (ADD c4 (NEG (ADD c4 (NEG B))))) (bl (ADD B (NEG bh)))
          (c5 (MUL Hh 134217729)) (Hhh (ADD c5 (NEG (ADD c5 (NEG Hh))))) (Hhl (ADD Hh (NEG Hhh)))
          (Th (MUL B Hh))
          (Te (ADD (ADD (ADD (ADD (MUL bh Hhh) (NEG Th)) (MUL bh Hhl)) (MUL bl Hhh)) (MUL bl Hhl)))
          (Tl (ADD Te (MUL B Hl)))
          ;; 2**(Th + Tl) = 2**Th (1 + Tl ln 2), |Tl| < 2**-42
          (E (EXP2 Th))
          (acc (ADD E (MUL E (MUL Tl 0.6931471805599453))))
                    ;; 2**Th overflows from 1024 on (plain gives inf there); below -1080 the result is 0
          (ok (AND (AND (CMPLT 0 X) (CMPLT X inf))
                   (AND (CMPLT (abs B) 1e300) (AND (CMPLT -1080 Th) (CMPLT Th 1024))))))
      (WHERE ok acc P))))
