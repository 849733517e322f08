"""What a benchmark needs: the loaded pipeline of images and evals, and what to build or grade and
why."""
