# src/tokenizer: (sources added by its issue)
