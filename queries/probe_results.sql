-- name: probe results
-- aliases: attention probes, probing classifiers, probes, uas, clark table 3
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 5, Table 3
-- description: Dependency parsing by probing classifiers over attention maps (UAS, percent of words,
--   punctuation not scored; each word's head the argmax over ROOT and every word of its sentence, itself
--   included, no tree decoding), trained as the released notebook does: one sentence per Adam step
--   (learning rate 0.002) on the loss summed over its words, one epoch, Glorot-initialised weights.
--   attn-only: a learned weight per head and direction over the word-level maps (ROOT: attention
--   between the word and [CLS]/[SEP], mixed by two learned scalars); attn+glove: the head weights
--   computed from the GloVe vectors of the two words; distances+glove: no attention, a 256-unit tanh
--   network over GloVe and distance features. Each candidate gets its own GloVe vector, as in the
--   paper's equation; rows whose glove column says 'shifted' use the released code's vectors (each
--   candidate the next word's; 'atlas probe --glove-shift'). Baselines (the project's, scored on the
--   probes' words): right-branching (each word's head is the next word, the last word is the root) and
--   left-branching (the previous word); the paper's 26 for right-branching is its Table 1 offset +1
--   baseline (see 'best head per dependency relation'). A probe on a random-init run is the paper's
--   'random init attn + glove'. One row per probe, GloVe variant and train/eval pair in the store: run
--   'atlas probe --train RUN --eval RUN' first.
--   ROOT's [CLS] and [SEP] are by role (tokens.role): the cls or bos token, and the other special tokens
--   (sep, eos); attention to a token the input lacks is 0 (GPT-2: no ROOT channel at all).
-- parameters:
-- needs: SELECT count(*) FROM probes
--   else: no probe results in the store: run 'atlas probe --train RUN --eval RUN' first
-- plot:

SELECT e.model,
       e.random_init,
       t.corpus AS train_corpus,
       e.corpus AS eval_corpus,
       p.probe,
       p.uas,
       p.n_words,
       p.train_uas,
       p.n_train_sentences,
       p.epochs,
       p.glove
FROM probes p
JOIN runs e ON e.run_id = p.run_id
JOIN runs t ON t.run_id = p.train_run_id
ORDER BY e.model, e.random_init, train_corpus, eval_corpus,
         CASE p.probe WHEN 'right-branching' THEN 1 WHEN 'left-branching' THEN 2 WHEN 'distances+glove' THEN 3
             WHEN 'attn-only' THEN 4 WHEN 'attn+glove' THEN 5 END,
         p.glove
