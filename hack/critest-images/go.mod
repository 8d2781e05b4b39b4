module crilet.invalid/hack/critest-images

go 1.22
